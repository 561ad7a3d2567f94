"""Cut SWE-bench instances from real repositories' history (the `swe-real` suite's data).

    python scripts/generate_swe_real.py --mirrors DIR [--per-repo 4] [--image arborl/base:latest]

DIR holds bare mirrors named `<owner>+<name>/repo` (or `<owner>__<name>.git`). For each
repository in `REPOS`, commits that change both its code and its tests are candidates, newest
first: the parent is `base_commit`, the code diff is the gold `patch`, the test diff the
`test_patch`. The test files are run (in a network-less container of the base image plus the
environment's wheels, as the evaluation will) at base + test patch and at the fix:
FAIL_TO_PASS = fail before, pass after; PASS_TO_PASS = pass both. A candidate whose tests do
not run at base, or that has no FAIL_TO_PASS, is skipped. The problem statement is the fix
commit's message (these commits have no issue text). Writes `data/instances.jsonl`,
`data/environments.json` and `data/repos/<owner>__<name>.bundle` (history up to the newest
fix used).

Needs Docker and the host's `pip` (wheels), like `arborl eval`; it is not run by the tests.
The environment images are built by the layer builder the caller passes (`main(argv, build)`;
the script passes the code env's Docker builder, `arborl.envs.code.instance_images.docker_builder`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..harness import grade, test_directives
from ..image_recipes import LayerBuilder, environment_layer
from ..instance import SWEEnvironment, SWEInstance
from ..log_parsers import parse_log
from ..wheels import fetch_wheels

DATA = Path(__file__).with_name("data")
PYTEST = "python3 -m pytest -rA -p no:cacheprovider -o addopts="


@dataclass(frozen=True)
class RepoRecipe:
    repo: str
    code: tuple[str, ...]
    tests: tuple[str, ...]
    environment: SWEEnvironment


REPOS: tuple[RepoRecipe, ...] = (
    RepoRecipe(
        "tkem/cachetools",
        ("src/",),
        ("tests/",),
        # src layout: the package is importable only with src on the path (SWE-bench installs it)
        SWEEnvironment(
            repo="tkem/cachetools",
            test_cmd=f"PYTHONPATH=src {PYTEST}",
            agent_test_cmd="PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider -o addopts=",
        ),
    ),
    RepoRecipe(
        "hukkin/tomli",
        ("src/",),
        ("tests/",),
        SWEEnvironment(
            repo="hukkin/tomli",
            test_cmd="PYTHONPATH=src python3 -m unittest -v",
            agent_test_cmd="PYTHONPATH=src python3 -m unittest",
            log_parser="unittest",
        ),
    ),
    RepoRecipe(
        "more-itertools/more-itertools",
        ("more_itertools/",),
        ("tests/",),
        SWEEnvironment(
            repo="more-itertools/more-itertools",
            test_cmd=PYTEST,
            agent_test_cmd="python3 -m pytest -q -p no:cacheprovider -o addopts=",
        ),
    ),
    RepoRecipe(
        "mahmoud/boltons",
        ("boltons/",),
        ("tests/",),
        SWEEnvironment(
            repo="mahmoud/boltons",
            test_cmd=PYTEST,
            agent_test_cmd="python3 -m pytest -q -p no:cacheprovider -o addopts=",
        ),
    ),
    RepoRecipe(
        "python-semver/python-semver",
        ("src/",),
        ("tests/",),
        SWEEnvironment(
            repo="python-semver/python-semver",
            test_cmd=f"PYTHONPATH=src {PYTEST}",
            agent_test_cmd="PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider -o addopts=",
        ),
    ),
    RepoRecipe(
        "pallets/itsdangerous",
        ("src/",),
        ("tests/",),
        # a third-party test dependency (freezegun, and its dateutil and six), as wheels
        SWEEnvironment(
            repo="pallets/itsdangerous",
            test_cmd=f"PYTHONPATH=src {PYTEST}",
            agent_test_cmd="PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider -o addopts=",
            pip=("freezegun==1.5.1",),
        ),
    ),
)


def git(git_dir: Path, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True
    ).stdout


def mirror_of(root: Path, repo: str) -> Path:
    for cand in (root / repo.replace("/", "+") / "repo", root / f"{repo.replace('/', '__')}.git"):
        if (cand / "HEAD").is_file():
            return cand
    raise FileNotFoundError(f"no mirror of {repo} under {root}")


def candidates(git_dir: Path, recipe: RepoRecipe, limit: int = 80) -> list[str]:
    out = []
    log = git(git_dir, "log", "--no-merges", "--format=%H", f"-{limit * 4}", "HEAD", "--", *recipe.code)
    for sha in log.split():
        files = git(git_dir, "diff-tree", "--no-commit-id", "--name-only", "-r", sha).split()
        if any(f.startswith(recipe.tests) and f.endswith(".py") for f in files) and any(
            f.startswith(recipe.code) and f.endswith(".py") for f in files
        ):
            out.append(sha)
        if len(out) >= limit:
            break
    return out


def run_tests(
    git_dir: Path, commit: str, test_patch: str, env: SWEEnvironment, image: str, files: list[str]
) -> dict[str, str] | None:
    """Statuses of `files` at `commit` (+ `test_patch` if given), in a container of `image`."""
    with tempfile.TemporaryDirectory(prefix="swe-real-") as tmp:
        wt = Path(tmp) / "w"
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(git_dir), str(wt)], check=True)
        subprocess.run(["git", "-C", str(wt), "checkout", "-q", commit], check=True, capture_output=True)
        if test_patch:
            r = subprocess.run(
                ["git", "-C", str(wt), "apply"], input=test_patch, text=True, capture_output=True
            )
            if r.returncode != 0:
                return None
        targets = " ".join(test_directives(files, env.test_directives))
        r = subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "--network",
                "none",
                "-v",
                f"{wt}:/w",
                "-w",
                "/w",
                image,
                "bash",
                "-c",
                f"{env.test_cmd} {targets} 2>&1",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        shutil.rmtree(wt, ignore_errors=True)
        return parse_log(env.log_parser, r.stdout)


def cut(git_dir: Path, recipe: RepoRecipe, sha: str, image: str) -> dict[str, Any] | None:
    base = git(git_dir, "rev-parse", f"{sha}^")
    base = base.strip()
    test_paths = [
        p for p in git(git_dir, "diff", "--name-only", base, sha).split() if p.startswith(recipe.tests)
    ]
    code_paths = [
        p for p in git(git_dir, "diff", "--name-only", base, sha).split() if not p.startswith(recipe.tests)
    ]
    patch = git(git_dir, "diff", "--binary", base, sha, "--", *code_paths)
    test_patch = git(git_dir, "diff", "--binary", base, sha, "--", *test_paths)
    py_tests = [p for p in test_paths if p.endswith(".py") and Path(p).name.startswith("test")]
    if not py_tests:
        return None
    before = run_tests(git_dir, base, test_patch, recipe.environment, image, test_paths)
    after = run_tests(git_dir, sha, "", recipe.environment, image, test_paths)
    if not before or not after:
        return None
    passing = ("PASSED", "XFAIL")
    f2p = sorted(t for t, s in after.items() if s in passing and before.get(t) not in passing)
    p2p = sorted(t for t, s in after.items() if s in passing and before.get(t) in passing)
    if not f2p or grade(after, f2p, p2p)["status"] != "FULL":
        return None
    message = git(git_dir, "log", "-1", "--format=%B", sha).strip()
    date = git(git_dir, "log", "-1", "--format=%cI", sha).strip()
    return {
        "instance_id": f"{recipe.repo.replace('/', '__')}-{sha[:10]}",
        "repo": recipe.repo,
        "base_commit": base,
        "problem_statement": message,
        "patch": patch,
        "test_patch": test_patch,
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "environment_setup_commit": base,
        "version": "",
        "created_at": date,
        "hints_text": "",
        "fix_commit": sha,
    }


def environment_image(env: SWEEnvironment, base_image: str, build: LayerBuilder) -> str:
    """The base image plus the environment's wheels (what its instance images are built on)."""
    if not env.pip:
        return base_image
    return build(base_image, environment_layer(env, env.repo, b"", fetch_wheels(env.pip)))


def main(argv: list[str] | None, build: LayerBuilder) -> None:
    """The generator's command line; `build` builds the environment images' layers."""
    ap = argparse.ArgumentParser(prog="scripts/generate_swe_real.py", description=__doc__.splitlines()[0])
    ap.add_argument("--mirrors", type=Path, required=True)
    ap.add_argument("--per-repo", type=int, default=4)
    ap.add_argument("--image", default="arborl/base:latest")
    ap.add_argument("--only", nargs="*", help="only these repositories")
    args = ap.parse_args(argv)
    (DATA / "repos").mkdir(parents=True, exist_ok=True)
    old = (
        [json.loads(x) for x in (DATA / "instances.jsonl").read_text().splitlines()]
        if (DATA / "instances.jsonl").is_file()
        else []
    )
    rows = [r for r in old if args.only and r["repo"] not in args.only]
    envs = []
    for recipe in REPOS:
        envs.append(recipe.environment.model_dump(exclude_defaults=True) | {"repo": recipe.repo})
        if args.only and recipe.repo not in args.only:
            continue
        git_dir = mirror_of(args.mirrors, recipe.repo)
        image = environment_image(recipe.environment, args.image, build)
        got = []
        for sha in candidates(git_dir, recipe):
            inst = cut(git_dir, recipe, sha, image)
            print(recipe.repo, sha[:10], "ok" if inst else "skipped", flush=True)
            if inst:
                SWEInstance.model_validate(inst)
                got.append(inst)
            if len(got) >= args.per_repo:
                break
        rows += got
        if got:  # the mirror's default branch, as one bundle with a `main` ref
            with tempfile.TemporaryDirectory() as tmp:
                clone = Path(tmp) / "r.git"
                subprocess.run(
                    ["git", "clone", "-q", "--bare", "--shared", str(git_dir), str(clone)], check=True
                )
                head = git(clone, "rev-parse", "HEAD").strip()
                git(clone, "update-ref", "refs/heads/main", head)
                git(clone, "symbolic-ref", "HEAD", "refs/heads/main")
                git(
                    clone,
                    "bundle",
                    "create",
                    str(DATA / "repos" / f"{recipe.repo.replace('/', '__')}.bundle"),
                    "HEAD",
                    "refs/heads/main",
                )
    rows.sort(key=lambda r: r["instance_id"])
    (DATA / "instances.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    (DATA / "environments.json").write_text(json.dumps(envs, indent=1) + "\n")
    print(f"{len(rows)} instances over {len({r['repo'] for r in rows})} repositories")
