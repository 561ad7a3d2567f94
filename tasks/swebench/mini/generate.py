"""Generate swe-mini: git repositories with real bugs, their fix commits, and SWE-bench instances.

    python -m arborl.tasks.swebench.mini.generate          # rewrites tasks/swebench/mini/data/
    python -m arborl.tasks.swebench.mini.generate --out DIR # somewhere else (tests compare)

For each repository of `repos.py` it builds a linear history with fixed authors and dates
(so commit hashes are the same on every machine):

    Initial commit (every bug present)            ← environment_setup_commit
    [docs: ...]                                   (an unrelated change, for some bugs)
    base_commit of bug 1
    Fix bug 1 (source fix + new tests)            ← the merged "PR"
    base_commit of bug 2 ...

An instance's `patch` is `git diff base fix` outside `tests/`, its `test_patch` the same
inside `tests/`. FAIL_TO_PASS and PASS_TO_PASS are measured, not declared: the test files
run (pytest -rA) at base + test patch and at the fix; a test is FAIL_TO_PASS if it fails
before and passes after, PASS_TO_PASS if it passes both times; every test must pass after.

Written: `instances.jsonl`, `environments.json`, and `repos/<owner>__<name>.bundle` (the
repositories themselves, as git bundles).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..harness import parse_pytest_log
from .repos import GITIGNORE, PYPROJECT, Repo, all_repos

DATA = Path(__file__).with_name("data")
_EPOCH = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
_IDENTITY = {"name": "arborl-mini maintainers", "email": "maintainers@arborl-mini.invalid"}


class GenerationError(RuntimeError):
    """A repository definition does not make a valid instance (a bug without failing tests, ...)."""


def _env(date: str | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": _IDENTITY["name"],
        "GIT_AUTHOR_EMAIL": _IDENTITY["email"],
        "GIT_COMMITTER_NAME": _IDENTITY["name"],
        "GIT_COMMITTER_EMAIL": _IDENTITY["email"],
    }
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    return env


def git(cwd: Path, *args: str, date: str | None = None) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, env=_env(date), capture_output=True, text=True)
    if r.returncode != 0:
        raise GenerationError(f"git {' '.join(args)} failed in {cwd}: {r.stderr.strip()}")
    return r.stdout


def render(repo: Repo, fixed: set[str], notes: list[str]) -> dict[str, str]:
    """The repository's files with the bugs in `fixed` fixed (and their tests added)."""
    readme = f"# {repo.name.split('/')[-1]}\n\n{repo.summary}\n"
    if notes:
        readme += "\n## Notes\n\n" + "".join(f"- {n}\n" for n in notes)
    files = {".gitignore": GITIGNORE, "pyproject.toml": PYPROJECT, "README.md": readme}
    for path, template in repo.files.items():
        text = template
        for bug in repo.bugs:
            for marker, buggy, fix in bug.changes:
                text = text.replace(f"@@{marker}@@\n", fix if bug.id in fixed else buggy)
        if "@@" in text:
            raise GenerationError(f"{repo.name}:{path}: a marker has no bug: {text[text.index('@@') :][:40]}")
        files[path] = text
    tests = dict(repo.tests)
    for bug in repo.bugs:
        if bug.id in fixed:
            tests[bug.test_file] += bug.tests
    return {**files, **tests}


def _write_tree(root: Path, files: dict[str, str]) -> None:
    for entry in root.iterdir():
        if entry.name != ".git":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def run_tests(workdir: Path, files: list[str], site: Path) -> dict[str, str]:
    """Test id → status of the given test files (pytest -rA), the environment on the path."""
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *files],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return parse_pytest_log(r.stdout)


def measure(
    repo_dir: Path, base: str, fix: str, test_patch: str, files: list[str], site: Path
) -> tuple[list[str], list[str]]:
    """FAIL_TO_PASS and PASS_TO_PASS, by running the tests before and after the fix."""
    with tempfile.TemporaryDirectory(prefix="swe-mini-") as tmp:
        work = Path(tmp) / "repo"
        git(Path(tmp), "clone", "-q", str(repo_dir), str(work))
        git(work, "checkout", "-q", base)
        (Path(tmp) / "test.patch").write_text(test_patch, encoding="utf-8")
        git(work, "apply", str(Path(tmp) / "test.patch"))
        before = run_tests(work, files, site)
        git(work, "checkout", "-q", "-f", fix)
        git(work, "clean", "-q", "-fdx")
        after = run_tests(work, files, site)
    failing = sorted(t for t, s in after.items() if s != "PASSED")
    if not after or failing:
        raise GenerationError(f"tests fail at the fix commit {fix[:10]}: {failing or 'no tests ran'}")
    f2p = sorted(t for t in after if before.get(t) != "PASSED")
    p2p = sorted(t for t in after if before.get(t) == "PASSED")
    if not f2p:
        raise GenerationError(f"no test fails before the fix {fix[:10]}: the bug is not exercised")
    return f2p, p2p


def build_repo(repo: Repo, root: Path, out: Path, clock: list[datetime]) -> list[dict[str, Any]]:
    """Build one repository's history under `root`, write its bundle; returns its instances."""
    site = root / "env-site"
    for rel, text in repo.environment.get("files", {}).items():
        if rel.startswith("site/"):
            (site / rel[5:]).parent.mkdir(parents=True, exist_ok=True)
            (site / rel[5:]).write_text(text, encoding="utf-8")
    work = root / "repo"
    work.mkdir(parents=True)
    git(work, "init", "-q", "-b", "main")

    def commit(files: dict[str, str], message: str) -> tuple[str, str]:
        date = clock[0].isoformat()
        clock[0] += timedelta(hours=7)
        _write_tree(work, files)
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", message, date=date)
        return git(work, "rev-parse", "HEAD").strip(), date

    fixed: set[str] = set()
    notes: list[str] = []
    setup_commit, _ = commit(render(repo, fixed, notes), "Initial commit")
    instances = []
    for number, bug in enumerate(repo.bugs, 1):
        if bug.docs_note:
            notes.append(bug.docs_note)
            commit(render(repo, fixed, notes), f"docs: {bug.docs_note}")
        base = git(work, "rev-parse", "HEAD").strip()
        fixed.add(bug.id)
        fix, date = commit(render(repo, fixed, notes), f"{bug.title} (#{number})")
        patch = git(work, "diff", "--no-color", base, fix, "--", ".", ":(exclude)tests")
        test_patch = git(work, "diff", "--no-color", base, fix, "--", "tests")
        f2p, p2p = measure(work, base, fix, test_patch, [bug.test_file], site)
        instances.append(
            {
                "instance_id": f"{repo.name.replace('/', '__')}-{number}",
                "repo": repo.name,
                "base_commit": base,
                "problem_statement": bug.problem_statement,
                "patch": patch,
                "test_patch": test_patch,
                "FAIL_TO_PASS": f2p,
                "PASS_TO_PASS": p2p,
                "environment_setup_commit": setup_commit,
                "version": repo.version,
                "hints_text": "",
                "created_at": date,
            }
        )
    bundle = out / "repos" / f"{repo.name.replace('/', '__')}.bundle"
    bundle.parent.mkdir(parents=True, exist_ok=True)
    git(work, "bundle", "create", "-q", str(bundle), "HEAD", "main")
    return instances


def generate(out: Path = DATA) -> list[dict[str, Any]]:
    """Build every repository and write the suite's data files into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    clock = [_EPOCH]
    instances: list[dict[str, Any]] = []
    environments = []
    with tempfile.TemporaryDirectory(prefix="swe-mini-build-") as tmp:
        for repo in all_repos():
            instances += build_repo(repo, Path(tmp) / repo.name.replace("/", "__"), out, clock)
            environments.append({"repo": repo.name, "version": repo.version, **repo.environment})
    lines = [json.dumps(inst, ensure_ascii=False, sort_keys=True) for inst in instances]
    (out / "instances.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "environments.json").write_text(json.dumps(environments, indent=1, sort_keys=True) + "\n")
    return instances


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DATA, help=f"output directory (default {DATA})")
    args = ap.parse_args(argv)
    instances = generate(args.out)
    print(f"wrote {len(instances)} instances over {len(all_repos())} repositories to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
