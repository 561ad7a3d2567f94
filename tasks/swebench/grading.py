"""SWE-bench's grade of a patch, read from what its verifier printed.

The verifier (`envs/code/verifier.py`, run in a sandbox by `envs/code/swe_grading.py`) refuses a
patch that touches test infrastructure, then the harness (`harness.py`) applies the model
patch, puts the test patch's files back to the base commit and applies the test patch, runs
the test files, and FAIL_TO_PASS / PASS_TO_PASS are read from the log:

    FULL     every FAIL_TO_PASS and PASS_TO_PASS test passes   (resolved)
    PARTIAL  some FAIL_TO_PASS pass, every PASS_TO_PASS passes
    NO       anything else; an empty patch, one that does not apply, or one that changes
             test infrastructure (reported as such)

The log is parsed here, by SWE-bench's own parser for the repositories it has one for (when
`swebench` is installed: `official.py`), else by the environment's `log_parser`. The whole
harness output is kept in the grade (`log`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from .harness import APPLY_FAILED, EXIT_APPLY_FAILED, EXIT_TEST_PATCH_FAILED, extract_test_output, grade
from .instance import SWEEnvironment, SWEInstance
from .official import read_statuses


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

    @classmethod
    def infrastructure_changed(cls, rejected: Sequence[str]) -> SWEGrade:
        """The grade of a patch the verifier refused for changing test infrastructure."""
        return cls.unresolved(f"test_infrastructure_changed: {'; '.join(rejected)}")


def patch_to_grade(model_patch: str | None) -> str | SWEGrade:
    """The patch as the harness takes it (ending in a newline), or the grade of no patch at all."""
    if model_patch is None:
        return SWEGrade.unresolved("no_patch")
    if not model_patch.strip():
        return SWEGrade.unresolved("empty_patch", empty_patch=True)
    return model_patch if model_patch.endswith("\n") else model_patch + "\n"


def grade_run(
    instance: SWEInstance,
    environment: SWEEnvironment,
    *,
    exit_code: int,
    stdout: str,
    stderr: str,
    timed_out: bool,
) -> SWEGrade:
    """The grade of one run of the harness, from its exit code and output."""
    log = stdout + (f"\n[stderr]\n{stderr}" if stderr.strip() else "")
    if exit_code == EXIT_APPLY_FAILED or APPLY_FAILED in stdout:
        return SWEGrade.unresolved("patch_apply_failed", patch_applied=False, log=log)
    if exit_code == EXIT_TEST_PATCH_FAILED:
        return SWEGrade.unresolved("test_patch_apply_failed", patch_applied=True, log=log)
    if timed_out:
        return SWEGrade.unresolved("tests_timed_out", patch_applied=True, log=log)
    statuses, parser = read_statuses(instance.repo, environment.log_parser, extract_test_output(stdout))
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
