"""Grading: SWE-bench semantics for code tasks, the env's own verdict for everything else.

SWE tasks (a `CodeTask` made from a SWE-bench instance): in a fresh sandbox of the task's
spec (the pool resets a released one in place, so this is the instance's starting state),
the task's verifier (`envs/code/verifier.py`, the same one the env's reward uses) refuses a
patch that touches test infrastructure, then its harness applies the model patch, puts the
test patch's files back to the base commit and applies the test patch, runs the test files,
and FAIL_TO_PASS / PASS_TO_PASS are read from the log:

    FULL     every FAIL_TO_PASS and PASS_TO_PASS test passes   (resolved)
    PARTIAL  some FAIL_TO_PASS pass, every PASS_TO_PASS passes
    NO       anything else; an empty patch, one that does not apply, or one that changes
             test infrastructure (reported as such)

The harness that runs in the sandbox only applies and runs; the log is parsed here, by
SWE-bench's own parser for the repositories it has one for (when `swebench` is installed:
`tasks/swebench/official.py`), else by the environment's `log_parser`. The whole harness output
is kept in the grade (`log`); `outputs.write_test_log` stores it (compressed when large).

Other tasks (tool, web, desktop) are graded by their env at the end of the episode: the
episode's total reward is the score (tool tasks: their verifier; web/desktop: the env's
evaluator), and success means a full score.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from arborl.envs.code.verifier import run_verifier
from arborl.sandboxes import SandboxPool, SandboxSpec
from arborl.tasks import CodeTask
from arborl.tasks.swebench import grade, swe_parts
from arborl.tasks.swebench.harness import (
    APPLY_FAILED,
    EXIT_APPLY_FAILED,
    EXIT_TEST_PATCH_FAILED,
    extract_test_output,
)
from arborl.tasks.swebench.official import read_statuses

#: How much harness output comes back from the sandbox (per stream, head and tail kept beyond it):
#: far above what the test files of one instance print, so the whole log reaches the grader.
MAX_LOG_BYTES = 32 * 1024 * 1024
#: A score at least this high counts as success (scores are in [0, 1]).
SUCCESS_SCORE = 1.0 - 1e-9


def _no_tests() -> dict[str, list[str]]:
    return {"success": [], "failure": []}


class SWEGrade(BaseModel):
    """The SWE-bench report of one instance."""

    status: Literal["FULL", "PARTIAL", "NO"]
    resolved: bool
    patch_applied: bool | None = Field(None, description="None when there was no patch to apply")
    empty_patch: bool = False
    error: str | None = Field(
        None, description="no_patch, patch_apply_failed, test_patch_apply_failed, tests_timed_out, ..."
    )
    FAIL_TO_PASS: dict[str, list[str]] = Field(default_factory=_no_tests)
    PASS_TO_PASS: dict[str, list[str]] = Field(default_factory=_no_tests)
    log: str = Field("", description="the whole harness output (patch application, test log)")
    log_parser: str = Field(
        "", description="what read the test log: swebench:<name> (SWE-bench's parser) or an arborl parser"
    )

    @classmethod
    def unresolved(cls, error: str, **kw: Any) -> SWEGrade:
        return cls(status="NO", resolved=False, error=error, **kw)


async def grade_swe(
    pool: SandboxPool, spec: SandboxSpec, task: CodeTask, model_patch: str | None
) -> SWEGrade:
    """Grade `model_patch` against the SWE task in a fresh sandbox of `spec` (see the module doc)."""
    parts = swe_parts(task)
    if parts is None:
        raise ValueError(f"task {task.id!r} was not made from a SWE-bench instance")
    instance, environment = parts
    if model_patch is None:
        return SWEGrade.unresolved("no_patch")
    if not model_patch.strip():
        return SWEGrade.unresolved("empty_patch", empty_patch=True)
    patch = model_patch if model_patch.endswith("\n") else model_patch + "\n"
    async with pool.acquire(spec) as sb:
        run = await run_verifier(sb, task, patch, max_output=MAX_LOG_BYTES)
    if run.rejected:
        why = "; ".join(run.rejected)
        return SWEGrade.unresolved(f"test_infrastructure_changed: {why}")
    assert run.result is not None
    r = run.result
    output = r.stdout + (f"\n[stderr]\n{r.stderr}" if r.stderr.strip() else "")
    log = output
    if r.exit_code == EXIT_APPLY_FAILED or APPLY_FAILED in r.stdout:
        return SWEGrade.unresolved("patch_apply_failed", patch_applied=False, log=log)
    if r.exit_code == EXIT_TEST_PATCH_FAILED:
        return SWEGrade.unresolved("test_patch_apply_failed", patch_applied=True, log=log)
    if r.timed_out:
        return SWEGrade.unresolved("tests_timed_out", patch_applied=True, log=log)
    statuses, parser = read_statuses(instance.repo, environment.log_parser, extract_test_output(r.stdout))
    report = grade(statuses, list(instance.FAIL_TO_PASS), list(instance.PASS_TO_PASS))
    return SWEGrade(
        status=report["status"],
        resolved=report["status"] == "FULL",
        patch_applied=True,
        FAIL_TO_PASS=report["FAIL_TO_PASS"],
        PASS_TO_PASS=report["PASS_TO_PASS"],
        log=log,
        log_parser=parser,
    )


def env_score(rewards: list[float]) -> tuple[float, bool]:
    """(score, success) of an episode graded by its env: the total reward, clipped to [0, 1]."""
    score = max(0.0, min(1.0, float(sum(rewards))))
    return score, score >= SUCCESS_SCORE
