"""A user's own files as suites (`suite=PATH`): SWE-bench instances whose repositories come from
a bundle, a bare mirror or a checkout (binary files intact), OSWorld task JSONs, predictions."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from arborl.tasks.suites import SuiteError
from arborl.tasks.swebench.convert import BIN_STAGE_DIR
from arborl.tasks.swebench.mini import INSTANCES, REPOS
from arborl.tasks.swebench.repos import RepositoryMapError, RepositoryNotFound, find_repository
from arborl.tasks.user_suites import detect_kind, suite_from_path, suite_slug

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe"


def git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@x",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@x",
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def checkout(tmp_path) -> tuple[Path, str]:
    repo = tmp_path / "src" / "me__tool"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("X = 1\n")
    (repo / "pkg" / "logo.png").write_bytes(PNG)
    (repo / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "link").symlink_to("pkg/__init__.py")
    (repo / ".gitattributes").write_text("pkg/__init__.py export-ignore\n")  # git archive would drop it
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    return repo, git(repo, "rev-parse", "HEAD").strip()


def test_a_repository_as_checkout_bare_mirror_or_bundle(checkout, tmp_path):
    repo, commit = checkout
    mirrors, bundles = tmp_path / "mirrors", tmp_path / "bundles"
    mirrors.mkdir(), bundles.mkdir()
    subprocess.run(["git", "clone", "-q", "--mirror", str(repo), str(mirrors / "me__tool.git")], check=True)
    git(repo, "bundle", "create", str(bundles / "me__tool.bundle"), "--all")
    seen = []
    for root, kind in ((repo.parent, "checkout"), (mirrors, "mirror"), (bundles, "bundle")):
        source = find_repository("me/tool", [tmp_path / "nothing-here", root])
        assert source.kind == kind
        snap = source.files_at(commit)
        assert snap.files["pkg/logo.png"] == PNG  # binary, byte for byte
        assert snap.files["pkg/__init__.py"] == b"X = 1\n"  # export-ignore does not apply
        assert snap.executable == {"run.sh"} and snap.symlinks == {"link": "pkg/__init__.py"}
        assert source.bundle()[:20].startswith(b"# v")  # a git bundle header
        seen.append(snap)
    assert seen[0] == seen[1] == seen[2]
    with pytest.raises(RepositoryNotFound, match=r"me__other\.bundle"):
        find_repository("me/other", [mirrors])


def test_repositories_under_owner_name_trees_any_name_or_a_mapping_file(checkout, tmp_path):
    """`<owner>/<name>` trees, bare repositories by any name found by their remote, and a mapping
    file for copies that have neither (a bundle, a fetched mirror without a remote)."""
    repo, commit = checkout
    want = find_repository("me/tool", [repo.parent]).files_at(commit)
    tree = tmp_path / "tree"
    subprocess.run(["git", "clone", "-q", "--mirror", str(repo), str(tree / "me" / "tool.git")], check=True)
    odd = tmp_path / "odd"
    subprocess.run(["git", "clone", "-q", "--mirror", str(repo), str(odd / "me+tool" / "repo")], check=True)
    git(odd / "me+tool" / "repo", "remote", "set-url", "origin", "git@github.com:me/tool.git")
    subprocess.run(["git", "clone", "-q", str(repo), str(odd / "work-copy")], check=True)
    git(odd / "work-copy", "remote", "set-url", "origin", "https://github.com/Me/Other.git")
    (tmp_path / "b").mkdir()
    git(repo, "bundle", "create", str(tmp_path / "b" / "snapshot-2024"), "--all")
    bare = tmp_path / "b" / "fetched"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
    git(bare, "remote", "remove", "origin")  # no remote to read, as a fetched mirror
    mapping = tmp_path / "b" / "repos.json"
    mapping.write_text(json.dumps({"me/tool": "snapshot-2024", "me/bare": "fetched"}))
    cases = [
        ("me/tool", tree, "mirror", tree / "me" / "tool.git"),
        ("me/tool", odd, "mirror", odd / "me+tool" / "repo"),  # by its remote, two levels down
        ("me/other", odd, "checkout", odd / "work-copy"),  # remote names compare case-blind
        ("me/tool", mapping, "bundle", tmp_path / "b" / "snapshot-2024"),
        ("me/bare", mapping, "mirror", bare),
    ]
    for name, root, kind, path in cases:
        source = find_repository(name, [tmp_path / "nothing-here", root])
        assert (source.kind, source.path) == (kind, path), name
        assert source.files_at(commit) == want
    with pytest.raises(RepositoryNotFound, match=r"me__gone\.bundle.*mapping file"):
        find_repository("me/gone", [odd, mapping])
    (tmp_path / "bad.json").write_text('["me/tool"]')
    with pytest.raises(RepositoryMapError, match=r"bad\.json"):
        find_repository("me/tool", [tmp_path / "bad.json"])
    mapping.write_text(json.dumps({"me/tool": "no-such-dir"}))
    with pytest.raises(RepositoryNotFound, match="no-such-dir"):
        find_repository("me/tool", [mapping])


def test_a_swe_file_with_repositories_from_a_mapping_file(tmp_path):
    path = instance_file(tmp_path, 1)
    repo = json.loads(path.read_text())["repo"]
    slug = repo.replace("/", "__")
    (tmp_path / "copies").mkdir()
    (tmp_path / "copies" / "whatever.bundle").write_bytes((REPOS / f"{slug}.bundle").read_bytes())
    (tmp_path / "map.json").write_text(json.dumps({repo: "copies/whatever.bundle"}))
    tasks = suite_from_path(str(path), repos_dirs=[tmp_path / "map.json"]).tasks()
    assert len(tasks) == 1 and any(p.endswith(".py") for p in tasks[0].repo_files)


def instance_file(tmp_path: Path, n: int = 2) -> Path:
    lines = INSTANCES.read_text().splitlines()[:n]
    path = tmp_path / "my-instances.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_swe_bench_file_is_a_suite(tmp_path):
    path = instance_file(tmp_path)
    assert detect_kind(path) == "swe" and suite_slug(str(path)) == "my-instances"
    suite = suite_from_path(str(path), repos_dirs=[REPOS])
    tasks = suite.tasks()
    assert [t.id for t in tasks] == [
        json.loads(line)["instance_id"] for line in path.read_text().splitlines()
    ]
    assert any(p.endswith(".py") for p in tasks[0].repo_files)
    assert suite.env_id == "arborl/Code-v0" and suite.gold_policy(tasks[0]) is not None
    with pytest.raises(RepositoryNotFound, match=r"set swe\.repos_dir"):
        suite_from_path(str(path)).tasks()


def test_binary_files_reach_the_task_through_a_staging_step(checkout):
    from arborl.tasks.swebench import SWEInstance, to_code_task

    repo, commit = checkout
    inst = SWEInstance.model_validate(
        {
            "instance_id": "me__tool-1",
            "repo": "me/tool",
            "base_commit": commit,
            "problem_statement": "p",
            "test_patch": "diff --git a/t.py b/t.py\n",
            "FAIL_TO_PASS": ["t"],
        }
    )
    task = to_code_task(inst, repo_files=find_repository("me/tool", [repo.parent]).files_at(commit))
    assert task.repo_files["pkg/__init__.py"] == "X = 1\n" and "pkg/logo.png" not in task.repo_files
    manifest = json.loads(task.repo_files[f"{BIN_STAGE_DIR}/manifest.json"])
    assert list(manifest["files"]) == ["pkg/logo.png"] and manifest["executable"] == ["run.sh"]
    assert task.setup[0].startswith("python3 -c") and BIN_STAGE_DIR in task.setup[0]
    # the staging step itself, run here in a scratch directory
    work = repo.parent.parent / "unpacked"
    work.mkdir()
    for rel, text in task.repo_files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    subprocess.run(["sh", "-c", task.setup[0]], cwd=work, check=True)
    assert (work / "pkg/logo.png").read_bytes() == PNG and not (work / BIN_STAGE_DIR).exists()
    assert (work / "run.sh").stat().st_mode & 0o111 and (work / "link").is_symlink()


def test_osworld_files_and_folders_are_suites(tmp_path):
    task = {
        "id": "t1",
        "instruction": "do it",
        "config": [],
        "evaluator": {
            "func": "exact_match",
            "result": {"type": "vm_command_line", "command": "echo a"},
            "expected": {"type": "rule", "rules": {"expected": "a\n"}},
        },
    }
    (tmp_path / "os").mkdir()
    (tmp_path / "os" / "t1.json").write_text(json.dumps(task))
    for target in (tmp_path / "os", tmp_path / "os" / "t1.json"):
        suite = suite_from_path(str(target))
        assert suite.env_id == "arborl/Desktop-v0" and [t.id for t in suite.tasks()] == ["t1"]
        assert suite.gold is None and suite.empty_policy(suite.tasks()[0])([], {}) == "DONE"
    (tmp_path / "os" / "gold.json").write_text(json.dumps({"t1": ["DONE"]}))
    assert suite_from_path(str(tmp_path / "os")).gold_policy(task=suite.tasks()[0])([], {}) == "DONE"


def test_files_that_are_neither_are_refused(tmp_path):
    (tmp_path / "x.json").write_text('{"hello": 1}')
    with pytest.raises(SuiteError, match="not of a kind arborl reads as a suite: SWE-bench instances"):
        suite_from_path(str(tmp_path / "x.json"))
    with pytest.raises(SuiteError, match="does not exist"):
        suite_from_path(str(tmp_path / "nope.jsonl"))
