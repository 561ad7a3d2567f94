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
    # as a user runs it: without this file's `from __future__ import annotations`
    exec(compile(code, "docs/envs.md", "exec", dont_inherit=True), {"__name__": "arborl_docs_benchmark"})
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


def test_a_user_benchmark_names_its_own_failures_and_its_own_table(tmp_path, monkeypatch):
    """A hook's own unresolved kind (its labels in the headline, its count in summary.json),
    its why (the report's error column, the console) and its own report table (kept in
    summary.json: `arborl eval-report` on the stored run draws it with no hook registered)."""
    import asyncio
    import io
    import subprocess
    import sys
    from collections import Counter
    from typing import ClassVar

    from rich.console import Console

    from arborl.cli import eval_cmds
    from arborl.envs import Step, TextEnv, register_env
    from arborl.envs.benchmarks import Benchmark, Grade, ReportTable
    from arborl.eval import EvalConfig, run_eval
    from arborl.tasks import Suite, Task, register_suite

    atlas = {"France": "Paris", "Japan": "Tokyo", "Kenya": "Nairobi"}
    replies = {"France": "Paris", "Japan": "tokyo", "Kenya": "Mombasa"}

    class QuizEnv(TextEnv):
        default_task = Task(id="France")

        async def on_reset(self, task):
            return f"What is the capital of {task.id}?"

        async def on_step(self, action):
            return Step("Noted.", reward=0.0, terminated=True, info={"answer": action.strip()})

    class Spelling(Benchmark):
        name = "spelling"
        unresolved_kinds: ClassVar = {"miscased": ("miscased answer", "miscased answers")}

        async def grade(self, env, task, record, ctx):
            answer, right = record.final("answer"), atlas[task.id]
            if answer == right:
                return Grade(1.0, True, "EXACT")
            if answer.lower() == right.lower():
                why = f"wrote {answer!r} for {right!r}"
                return Grade(
                    0.0, False, "CASE", unresolved_kind="miscased", why=why, why_text="the atlas: " + right
                )
            return Grade(0.0, False, "WRONG", error="wrong_city")

        def report_tables(self, results):
            n = Counter(r.grade for r in results)
            return [
                ReportTable("Spelling", ["exact", "case only", "wrong"], [n["EXACT"], n["CASE"], n["WRONG"]])
            ]

    register_env("myorg/Spelling-v0", QuizEnv, benchmark=Spelling(), force=True)
    register_suite(
        Suite(
            "spelling",
            "myorg/Spelling-v0",
            loader=lambda: [Task(id=c) for c in atlas],
            gold=lambda task: lambda messages, info: replies[task.id],
            max_turns=1,
        ),
        force=True,
    )
    monkeypatch.chdir(tmp_path)
    outcome = asyncio.run(run_eval(EvalConfig(suite="spelling", agent="gold", run={"dir": "runs/spelling"})))
    run = tmp_path / "runs" / "spelling"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["headline"] == "resolved 1/3 (33.3%) · unresolved 2: 1 failed, 1 miscased answer"
    assert list(summary["unresolved_by_kind"])[:2] == ["failed", "miscased"]
    assert summary["grades"] == {"EXACT": 1, "CASE": 1, "WRONG": 1}
    assert summary["grade_errors"] == {"wrong_city": 1}
    assert summary["report_tables"] == [
        {"title": "Spelling", "columns": ["exact", "case only", "wrong"], "row": [1, 1, 1]}
    ]
    md = (run / "report.md").read_text()
    assert (
        "## Spelling" in md
        and "| run | exact | case only | wrong |" in md
        and "| spelling | 1 | 1 | 1 |" in md
    )
    assert "miscased answers" in md  # a column of the unresolved kinds
    assert "| wrote 'tokyo' for 'Tokyo' |" in md and "| grade: wrong_city |" in md
    assert "<pre>the atlas: Tokyo</pre>" in (run / "report.html").read_text()
    # the console: the verdicts, then each sample unresolved in the benchmark's own kind, with why
    out = io.StringIO()
    monkeypatch.setattr(eval_cmds, "console", Console(file=out, width=200))
    eval_cmds._print_outcome(outcome, "spelling · gold")
    printed = out.getvalue()
    assert "grades: CASE 1, EXACT 1, WRONG 1 (wrong_city 1)" in printed
    assert "  Japan#0: wrote 'tokyo' for 'Tokyo'\n      the atlas: Tokyo\n" in printed
    assert "Kenya#0" not in printed
    # a stored run, reported by a process that registered nothing: the same headline and table
    (run / "report.md").unlink()
    res = subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", "eval-report", str(run)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert summary["headline"] in " ".join(res.stdout.split())
    assert (run / "report.md").read_text() == md
