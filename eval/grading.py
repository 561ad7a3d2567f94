"""Grading: SWE-bench semantics for code tasks, the env's own verdict for everything else.

SWE tasks (a `CodeTask` made from a SWE-bench instance): in a fresh sandbox of the task's
spec (the pool resets a released one in place, so this is the instance's starting state),
apply the model patch, put the test patch's files back to the base commit and apply the
test patch, run the test files, and read FAIL_TO_PASS / PASS_TO_PASS from the log:

    FULL     every FAIL_TO_PASS and PASS_TO_PASS test passes   (resolved)
    PARTIAL  some FAIL_TO_PASS pass, every PASS_TO_PASS passes
    NO       anything else; an empty patch, or one that does not apply (reported as such)

The harness that runs in the sandbox only applies and runs; the log is parsed here, by
SWE-bench's own parser for the repositories it has one for (when `swebench` is installed:
`tasks/swebench/official.py`), else by the environment's `log_parser`. The whole harness output
is kept in the grade (`log`); `outputs.write_test_log` stores it (compressed when large).

Other tasks (tool, web, desktop) are graded by their env at the end of the episode: the
episode's total reward is the score (tool tasks: their verifier; web/desktop: the env's
evaluator), and success means a full score.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field

from arborl.sandboxes import SandboxPool, SandboxSpec
from arborl.tasks.swebench import SWEEnvironment, SWEInstance, grade
from arborl.tasks.swebench.convert import harness_files, harness_spec
from arborl.tasks.swebench.harness import (
    APPLY_FAILED,
    EXIT_APPLY_FAILED,
    EXIT_TEST_PATCH_FAILED,
    extract_test_output,
)
from arborl.tasks.swebench.official import read_statuses

GRADE_DIR = "/tmp/arborl-grade"
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
    pool: SandboxPool,
    spec: SandboxSpec,
    instance: SWEInstance,
    environment: SWEEnvironment,
    model_patch: str | None,
) -> SWEGrade:
    """Grade `model_patch` against `instance` in a fresh sandbox of `spec` (see the module doc)."""
    if model_patch is None:
        return SWEGrade.unresolved("no_patch")
    if not model_patch.strip():
        return SWEGrade.unresolved("empty_patch", empty_patch=True)
    spec_json = harness_spec(
        instance, environment, test_patch=f"{GRADE_DIR}/test.patch", model_patch=f"{GRADE_DIR}/model.patch"
    )
    files = {
        **harness_files(),
        "spec.json": json.dumps(spec_json),
        "test.patch": instance.test_patch,
        "model.patch": model_patch if model_patch.endswith("\n") else model_patch + "\n",
    }
    async with pool.acquire(spec) as sb:
        await sb.exec(["mkdir", "-p", GRADE_DIR], timeout=30)
        await sb.upload(files, GRADE_DIR)
        r = await sb.exec(
            ["python3", f"{GRADE_DIR}/harness.py", f"{GRADE_DIR}/spec.json"],
            timeout=environment.test_timeout_s + 120,
            max_output=MAX_LOG_BYTES,
        )
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
