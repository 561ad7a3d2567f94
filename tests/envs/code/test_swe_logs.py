"""Whole test logs: the grade keeps the harness output whole, the run directory stores it (gzip
past 1 MiB), and SWE-bench's own grader (`get_eval_report`), run on the log arborl stored, gives
the verdicts arborl gave, for a log over 64 KiB (more-itertools' are 68-72 KB)."""

from __future__ import annotations

import gzip

import gymnasium
import pytest
from gitrepo import commit, git

import arborl.envs  # noqa: F401
from arborl.envs.code.swe_grading import grade_swe, swe_grade
from arborl.eval.outputs import GZIP_BYTES, read_output, write_output, write_outputs
from arborl.sandboxes import PoolConfig, SandboxPool
from arborl.tasks.swebench import SWEInstance, swe_parts, to_code_task
from arborl.tasks.swebench.repos import find_repository

N_TESTS = 2000  # -rA prints one line per test: ~55 bytes each, well over 64 KiB


def test_large_logs_are_stored_whole_and_compressed(tmp_path):
    small, large = "x" * 100 + "\n", "".join(f"PASSED tests/t.py::test_{i}\n" for i in range(60_000))
    assert len(large.encode()) > GZIP_BYTES
    for log in (small, large):
        out = tmp_path / str(len(log))
        out.mkdir()
        path = write_output(out, "test.log", log)
        assert path.name == ("test.log.gz" if log is large else "test.log")
        assert read_output(out, "test.log") == log
    assert gzip.decompress((tmp_path / str(len(large)) / "test.log.gz").read_bytes()).decode() == large
    assert read_output(tmp_path, "test.log") == ""


MANY = (
    "import pytest\nfrom tool import scale\n\n\n"
    f"@pytest.mark.parametrize('n', range({N_TESTS}))\n"
    "def test_scaling_keeps_every_small_value_in_order(n):\n    assert scale(n, 1) == n\n"
)


@pytest.fixture
def many_tests(tmp_path) -> tuple[SWEInstance, str]:
    """An instance whose test file has N_TESTS tests, and a patch that fixes the bug but breaks
    one PASS_TO_PASS test."""
    repo = tmp_path / "repos" / "me__many"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    buggy = "def scale(x, k):\n    return x * abs(k)\n"
    base = commit(repo, {"tool.py": buggy, "tests/test_many.py": MANY}, "tool")
    fixed = "def scale(x, k):\n    return x * k\n"
    new_test = MANY + "\n\ndef test_negative_factor():\n    assert scale(2, -3) == -6\n"
    fix = commit(repo, {"tool.py": fixed, "tests/test_many.py": new_test}, "scale: keep the factor's sign")
    git(repo, "checkout", "-q", "-b", "broken", base)
    broken = commit(repo, {"tool.py": "def scale(x, k):\n    return x * k if x != 7 else 0\n"}, "broken")
    ids = [f"tests/test_many.py::test_scaling_keeps_every_small_value_in_order[{n}]" for n in range(N_TESTS)]
    inst = SWEInstance(
        instance_id="me__many-1",
        repo="me/many",
        base_commit=base,
        problem_statement="scale drops the factor's sign",
        patch=git(repo, "diff", base, fix, "--", "tool.py"),
        test_patch=git(repo, "diff", base, fix, "--", "tests"),
        FAIL_TO_PASS=("tests/test_many.py::test_negative_factor",),
        PASS_TO_PASS=tuple(ids),
    )
    return inst, git(repo, "diff", base, broken, "--", "tool.py")


@pytest.mark.docker
async def test_swe_bench_grades_arborls_stored_logs_as_arborl_did(
    docker_backend, official, many_tests, tmp_path
):
    inst, breaking = many_tests
    task = to_code_task(
        inst, repo_files=find_repository(inst.repo, [tmp_path / "repos"]).files_at(inst.base_commit)
    )
    inst, _ = swe_parts(task)
    spec = gymnasium.make("arborl/Code-v0").unwrapped.sandbox_spec(task)
    patches = {"gold": inst.patch, "breaks_one": breaking}
    async with SandboxPool(docker_backend, PoolConfig(max_size=2)) as pool:
        grades = {name: await grade_swe(pool, spec, task, patch) for name, patch in patches.items()}
    assert grades["gold"].status == "FULL" and grades["breaks_one"].status == "NO"
    broken_test = "tests/test_many.py::test_scaling_keeps_every_small_value_in_order[7]"
    assert grades["breaks_one"].PASS_TO_PASS["failure"] == [broken_test]
    test_spec = official["TestSpec"](
        instance_id=inst.instance_id,
        image="",
        eval_script_list=[],
        repo=inst.repo,
        version="",
        FAIL_TO_PASS=list(inst.FAIL_TO_PASS),
        PASS_TO_PASS=list(inst.PASS_TO_PASS),
        log_parser="parse_log_pytest",
        eval_type="pass_and_fail",
    )
    for sample, (name, grade) in enumerate(grades.items()):
        out = write_outputs(tmp_path / "run", inst.instance_id, sample, None, swe_grade(grade, patches[name]))
        stored = out / "test.log"
        assert stored.stat().st_size > 64 * 1024 and read_output(out, "test.log") == grade.log
        prediction = {
            "instance_id": inst.instance_id,
            "model_patch": patches[name],
            "model_name_or_path": "m",
        }
        report = official["grading"].get_eval_report(test_spec, prediction, str(stored), True)[
            inst.instance_id
        ]
        assert report["patch_successfully_applied"], name
        assert report["resolved"] == grade.resolved, name
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            assert report["tests_status"][key] == getattr(grade, key), (name, key)


def test_a_code_episodes_patch_is_its_hooks_file_and_stays_out_of_infos(tmp_path):
    """The model patch is written as patch.diff by the code env's hook (`episode_files`), graded
    or not, and left out of infos.json; a hook that names no such file writes none."""
    import json

    from arborl.envs.benchmarks import ENV_GRADED, EpisodeRecord, benchmark_for

    patch = "diff --git a/x b/x\n+é\n" * 3
    record = EpisodeRecord(messages=[], infos=[{"model_patch": patch, "verifier": "ok"}], rewards=[0.0])
    out = write_outputs(tmp_path / "a", "i", 0, record, None, "timed out", benchmark_for("arborl/Code-v0"))
    assert (out / "patch.diff").read_text(encoding="utf-8") == patch
    assert json.loads((out / "infos.json").read_text()) == [{"verifier": "ok"}]
    out = write_outputs(tmp_path / "b", "i", 0, record, None, None, ENV_GRADED)
    assert not (out / "patch.diff").exists() and "model_patch" in (out / "infos.json").read_text()
