"""swe-mini's shipped data: real repositories, real commits, patches that apply, measured test
lists, and a generator that reproduces all of it byte for byte."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from arborl.tasks import CodeTask, get_suite
from arborl.tasks.swebench import files_in_patch, policies, swe_parts
from arborl.tasks.swebench import mini as swe_mini
from arborl.tasks.swebench.mini.generate import generate


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def test_at_least_ten_instances_over_several_repositories():
    instances = swe_mini.instances()
    assert len(instances) >= 10 and len({i.instance_id for i in instances}) == len(instances)
    assert len({i.repo for i in instances}) >= 4
    envs = {(e.repo, e.version) for e in swe_mini.environments()}
    for inst in instances:
        assert inst.FAIL_TO_PASS and inst.PASS_TO_PASS and inst.problem_statement.strip()
        assert (inst.repo, inst.version) in envs
        assert all(not f.startswith("tests/") for f in files_in_patch(inst.patch))  # source only
        assert all(f.startswith("tests/") for f in files_in_patch(inst.test_patch))
        assert all(t.split("::")[0] in inst.test_files for t in (*inst.FAIL_TO_PASS, *inst.PASS_TO_PASS))


def test_commits_exist_and_patches_apply_at_the_base_commit(tmp_path):
    for inst in swe_mini.instances():
        clone = swe_mini.clone_of(swe_mini.bundle_for(inst.repo))
        for commit in (inst.base_commit, inst.environment_setup_commit):
            assert git(clone, "cat-file", "-e", f"{commit}^{{commit}}").returncode == 0, commit
        work = tmp_path / inst.instance_id
        assert git(tmp_path, "clone", "-q", str(clone), str(work)).returncode == 0
        assert git(work, "checkout", "-q", inst.base_commit).returncode == 0
        for name, patch in (("patch", inst.patch), ("test_patch", inst.test_patch)):
            (tmp_path / f"{name}.diff").write_text(patch)
            r = git(work, "apply", "--check", str(tmp_path / f"{name}.diff"))
            assert r.returncode == 0, f"{inst.instance_id} {name}: {r.stderr}"


def test_the_suite_loads_portable_code_tasks_at_the_base_commit():
    suite = get_suite("swe-mini")
    tasks = suite.tasks()
    assert len(tasks) == len(swe_mini.instances())
    for task in tasks:
        assert isinstance(task, CodeTask) and task.metadata["suite"] == "swe-mini"
        inst, _ = swe_parts(task)
        files = swe_mini.files_at(swe_mini.clone_of(swe_mini.bundle_for(inst.repo)), inst.base_commit)
        assert {k: v for k, v in task.repo_files.items() if not k.startswith(".arborl-env/")} == files
        assert task.verify_command.startswith("python3 -I /tmp/arborl-verify/harness.py")
        assert task.verifier_applies_patch and not task.hidden_files
    shop = next(t for t in tasks if "shopcart" in t.id)
    assert ".arborl-env/site/moneyfmt/__init__.py" in shop.repo_files  # its dependency, installed by setup


def test_gold_and_empty_policies_use_the_code_env_tools():
    task = get_suite("swe-mini").tasks()[0]
    gold = policies.gold_policy(task)
    history: list[dict] = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    names = []
    for _ in range(3):
        reply = gold(history, {})
        names.append(json.loads(reply.split("\n", 1)[1].rsplit("\n", 1)[0])["name"])
        history += [{"role": "assistant", "content": reply}, {"role": "tool", "content": "ok"}]
    assert names == ["bash", "run_tests", "submit"]
    assert "git apply" in gold(history[:2], {})
    assert '"submit"' in policies.empty_policy(task)([], {})
    with pytest.raises(ValueError, match="not a SWE-bench task"):
        policies.gold_policy(CodeTask(id="x", problem_statement="p"))


@pytest.mark.slow
def test_the_generator_reproduces_the_shipped_data(tmp_path):
    """Commit hashes, patches and the measured FAIL_TO_PASS / PASS_TO_PASS (pytest really runs)."""
    generate(tmp_path)
    for name in ("instances.jsonl", "environments.json"):
        assert (tmp_path / name).read_text() == (swe_mini.DATA / name).read_text(), name
    for bundle in sorted(swe_mini.REPOS.glob("*.bundle")):
        shipped = git(swe_mini.REPOS, "bundle", "list-heads", bundle.name).stdout
        assert git(tmp_path / "repos", "bundle", "list-heads", bundle.name).stdout == shipped
