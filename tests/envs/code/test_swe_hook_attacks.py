"""The SWE-bench hook as a reward-hacking agent sees it: what it can make grading do must
stay its own failure (NO), never an abstention (an environment or infrastructure error, which
headlines do not count against it) and never a pass.

The sandboxed grade is replaced by what a hostile patch makes it do; the hook's reading of it
is what is under test."""

from __future__ import annotations

import asyncio

import pytest

import arborl.envs  # noqa: F401 - registers the hooks
import arborl.envs.code.swe_grading as swe_grading
from arborl.envs.benchmarks import EnvironmentBroken, EpisodeRecord, GradeContext, InfraError, benchmark_for
from arborl.sandboxes import SandboxCrashed
from arborl.tasks import get_suite
from arborl.tasks.swebench.grading import SWEGrade


class _Env:
    class unwrapped:  # stands in for the env's `unwrapped`
        @staticmethod
        def sandbox_spec(task):
            return None


def _grade(monkeypatch, outcome, agent="model"):
    async def fake_grade_swe(pool, spec, task, patch):
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(swe_grading, "grade_swe", fake_grade_swe)
    suite = get_suite("swe-mini")
    task = suite.tasks()[0]
    hook = benchmark_for(suite)
    record = EpisodeRecord(messages=[], infos=[{"model_patch": "diff --git a/x b/x\n"}], rewards=[1.0])
    ctx = GradeContext(suite, pool=None, config=None, agent=agent)
    return asyncio.run(hook.grade(_Env(), task, record, ctx))


def test_a_patch_whose_code_kills_the_grading_sandbox_is_graded_no(monkeypatch):
    """Crash to abstain: the patch's code kills its grading sandbox (the backend says the
    sandbox's own limits did it) — a NO for the agent, not a retried infrastructure error."""
    grade = _grade(monkeypatch, SandboxCrashed("sb", "memory limit", fault="agent"))
    assert not grade.success and grade.score == 0.0 and grade.label == "NO"
    assert grade.details["grade"]["error"].startswith("tests_crashed_sandbox")


def test_an_infrastructure_failure_is_retried_not_scored(monkeypatch):
    with pytest.raises(InfraError, match="grading failed"):
        _grade(monkeypatch, SandboxCrashed("sb", "docker daemon restarted", fault="infra"))


def test_a_model_agent_cannot_turn_its_failure_into_an_environment_error(monkeypatch):
    """Only the gold policy failing means the environment is broken; an agent whose patch
    fails every test is graded NO, however it fails, and the env's reward of 1.0 in its own
    step info (which the agent's episode produced) does not count: the hook's grade does."""
    failing = SWEGrade.unresolved("tests failed", patch_applied=True)
    grade = _grade(monkeypatch, failing, agent="model")
    assert (grade.success, grade.score, grade.label) == (False, 0.0, "NO")
    with pytest.raises(EnvironmentBroken, match="gold patch does not resolve"):
        _grade(monkeypatch, failing, agent="gold")
