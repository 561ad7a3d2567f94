"""SWE-bench grading in a sandbox: the task's verifier run on the model patch, read as
SWE-bench reads it (`arborl.tasks.swebench.grading`).

In a fresh sandbox of the task's spec (the pool resets a released one in place, so this is
the instance's starting state) the task's verifier (`verifier.py`, the same one the env's
reward uses) runs the SWE-bench harness on the patch; the whole harness output comes back
to the grader, which keeps it in the grade (`log`).
"""

from __future__ import annotations

from arborl.sandboxes import SandboxPool, SandboxSpec
from arborl.tasks import CodeTask
from arborl.tasks.swebench import swe_parts
from arborl.tasks.swebench.grading import SWEGrade, grade_run, patch_to_grade

from .verifier import run_verifier

#: How much harness output comes back from the sandbox (per stream, head and tail kept beyond it):
#: far above what the test files of one instance print, so the whole log reaches the grader.
MAX_LOG_BYTES = 32 * 1024 * 1024


async def grade_swe(
    pool: SandboxPool, spec: SandboxSpec, task: CodeTask, model_patch: str | None
) -> SWEGrade:
    """Grade `model_patch` against the SWE task in a fresh sandbox of `spec` (see the module doc)."""
    parts = swe_parts(task)
    if parts is None:
        raise ValueError(f"task {task.id!r} was not made from a SWE-bench instance")
    instance, environment = parts
    patch = patch_to_grade(model_patch)
    if isinstance(patch, SWEGrade):
        return patch
    async with pool.acquire(spec) as sb:
        run = await run_verifier(sb, task, patch, max_output=MAX_LOG_BYTES)
    if run.rejected:
        return SWEGrade.infrastructure_changed(run.rejected)
    assert run.result is not None
    r = run.result
    return grade_run(
        instance,
        environment,
        exit_code=r.exit_code,
        stdout=r.stdout,
        stderr=r.stderr,
        timed_out=r.timed_out,
    )
