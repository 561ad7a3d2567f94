"""docs/envs.md's "Add a benchmark" example, run exactly as written: a user's env, its grading
hook and its suite, in registration lines, graded by `arborl eval` through the hook."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from arborl.envs.benchmarks import ENV_GRADED, benchmark_for

ROOT = Path(__file__).resolve().parents[2]


def example() -> str:
    text = (ROOT / "docs" / "envs.md").read_text()
    m = re.search(
        r"<!-- user-benchmark:start -->\n```python\n(.*?)```\n<!-- user-benchmark:end -->", text, re.S
    )
    assert m, "docs/envs.md lost its user-benchmark example markers"
    return m.group(1)


def test_the_documented_benchmark_grades_through_its_hook(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = example()
    exec(compile(code, "docs/envs.md", "exec"), {"__name__": "arborl_docs_benchmark"})  # asserts inside
    hook = benchmark_for("myorg/Capitals-v0")
    assert hook is not ENV_GRADED and hook.name == "capitals"
    # the hook's files and verdicts are in the run directory
    answers = sorted(p.read_text() for p in (tmp_path / "runs" / "capitals").rglob("answer.txt"))
    assert answers == ["Nairobi", "Paris", "Tokyo"]
    summary = json.loads((tmp_path / "runs" / "capitals" / "summary.json").read_text())
    assert summary["grades"] == {"EXACT": 3}
    # the report says what success meant (the suite's rule, through the hook)
    assert summary["success_rule"].startswith("score >= 1")
    assert summary["success_rule"] in (tmp_path / "runs" / "capitals" / "report.md").read_text()


def test_a_suite_without_a_hook_is_graded_by_its_env_and_its_success_rule():
    """The env-graded default: the score is the total reward clipped to [0, 1], success the
    suite's own rule (a partial-score suite may lower it), the same rule training reads."""
    import asyncio

    from arborl.envs.benchmarks import EpisodeRecord, GradeContext
    from arborl.tasks import Suite, Task

    strict = Suite("s", "arborl/Tool-v0", loader=list)
    lenient = Suite("l", "arborl/Tool-v0", loader=list, success_score=0.5)
    record = EpisodeRecord(messages=[], infos=[], rewards=[0.25, 0.5])
    for suite, success in ((strict, False), (lenient, True)):
        grade = asyncio.run(ENV_GRADED.grade(None, Task(id="t"), record, GradeContext(suite, None, None)))
        assert grade.score == pytest.approx(0.75) and grade.success is success
    assert strict.success(1.0 - 1e-12) and not strict.success(0.99) and strict.success(3.0)
    assert "score >= 0.5" in lenient.success_rule
