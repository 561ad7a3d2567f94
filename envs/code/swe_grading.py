"""SWE-bench grading in a sandbox: the task's verifier run on the model patch, read as
SWE-bench reads it (`arborl.tasks.swebench.grading`); and `SWEBench`, the hook through which
`arborl eval` grades the SWE-bench suites (`arborl.envs.benchmarks`).

In a fresh sandbox of the task's spec (the pool resets a released one in place, so this is
the instance's starting state) the task's verifier (`verifier.py`, the same one the env's
reward uses) runs the SWE-bench harness on the patch; the whole harness output comes back
to the grader, which keeps it in the grade (`log`).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, cast

import gymnasium
from pydantic import BaseModel, ConfigDict, Field

from arborl.sandboxes import SandboxBackend, SandboxError, SandboxPool, SandboxSpec
from arborl.tasks import CodeTask, Suite, Task
from arborl.tasks.swebench import environment_hint, swe_parts
from arborl.tasks.swebench.grading import SWEGrade, grade_run, patch_to_grade
from arborl.tasks.swebench.hunks import first_failing_hunk
from arborl.tasks.swebench.predictions import load_predictions, select_predicted

from ..benchmarks import (
    Benchmark,
    EnvironmentBroken,
    EpisodeRecord,
    Grade,
    GradeContext,
    GradedResult,
    InfraError,
    PredictionSource,
    ReportTable,
    same_on_every_node,
)
from .instance_images import with_instance_images
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


# ---- the SWE-bench hook of `arborl eval` (arborl.envs.benchmarks) ------------------------------
#: The grade's error for a model patch that applies neither way (the report shows its hunk).
APPLY = "patch_apply_failed"
#: Its unresolved kind: counted apart from the other failures in the headline and the report.
PATCH_APPLY = "patch_apply"


class SWEOptions(BaseModel):
    """eval's `swe` section: how SWE-bench instances are prepared and where a user's
    instance files find their repositories."""

    model_config = ConfigDict(extra="forbid")

    images: Literal["auto", "off"] = Field(
        "auto", description="auto: SWE tasks run on instance images when the backend is Docker"
    )
    repos_dir: list[str] = Field(
        default_factory=list,
        description="where repositories are: directories holding <owner>__<name>.bundle, a bare mirror "
        "<owner>__<name>.git, a checkout <owner>__<name>/.git (or the same under <owner>/<name>), or any "
        "bare repository or checkout whose remote URL names the repository; or .json mapping files "
        '{"owner/name": "path"} (arborl.tasks.swebench.repos)',
    )
    environments: str | None = Field(
        None, description="a JSON list of SWEEnvironment (per repo/version install, test command, log parser)"
    )
    split: str | None = Field(
        None, description="the split of a `datasets` DatasetDict directory given as suite"
    )


#: SWE-bench's verdicts, in the order of the report's table.
VERDICTS = ("FULL", "PARTIAL", "NO")


class SWEBench(Benchmark):
    """How `arborl eval` runs SWE-bench tasks on `arborl/Code-v0`: on instance images (Docker,
    `swe.images=auto`), each patch graded in a fresh sandbox by SWE-bench's semantics, the
    grade and the whole harness log kept per instance, predictions files graded without an
    agent. Code tasks not made from a SWE-bench instance are graded by their env."""

    name = "swe-bench"
    unresolved_kinds: ClassVar[Mapping[str, tuple[str, str]]] = {
        PATCH_APPLY: ("patch-apply failure", "patch-apply failures")
    }
    options: ClassVar[tuple[str, type[BaseModel]] | None] = ("swe", SWEOptions)
    info_keys_in_files: ClassVar[tuple[str, ...]] = ("model_patch",)

    async def prepare(self, tasks: list[Task], ctx: GradeContext) -> list[Task]:
        opts = ctx.options or SWEOptions()
        if opts.images != "auto" or not any(swe_parts(t) for t in tasks):
            return tasks
        backend = getattr(ctx.pool, "backend", None)
        if backend is not None:
            return await with_instance_images(tasks, backend, opts.repos_dir)
        # sandboxes on other hosts (sandbox=ray): each node builds them on its own engine
        return await images_on_each_node(ctx.pool, tasks, opts.repos_dir)

    def reader_options(self, options: Any = None) -> dict[str, Any]:
        opts = options or SWEOptions()
        return {"repos_dirs": opts.repos_dir, "environments": opts.environments, "split": opts.split}

    def episode_files(self, record: EpisodeRecord) -> dict[str, str | bytes]:
        patch = record.final("model_patch")  # any code task's, SWE-bench's or not
        return {"patch.diff": patch} if isinstance(patch, str) else {}

    async def grade(self, env: gymnasium.Env, task: Task, record: EpisodeRecord, ctx: GradeContext) -> Grade:
        parts = swe_parts(task)
        if parts is None:
            return await super().grade(env, task, record, ctx)
        grade = await self._grade(env, cast(CodeTask, task), record, ctx)
        out = swe_grade(grade, record.final("model_patch"))
        if ctx.agent == "gold" and not grade.resolved:
            # The reference fix does not resolve here: the environment (dependencies, test
            # command, layout) is broken, and every agent would be graded NO for it.
            why = grade.error or f"{grade.status}; failing: " + ", ".join(
                (grade.FAIL_TO_PASS["failure"] + grade.PASS_TO_PASS["failure"])[:5]
            )
            hint = environment_hint(grade.log, grade.error, *parts)
            raise EnvironmentBroken(
                f"the gold patch does not resolve this instance ({why})"
                + (f"; likely cause: {hint}" if hint else ""),
                grade=out,
            )
        return out

    async def _grade(
        self, env: gymnasium.Env, task: CodeTask, record: EpisodeRecord, ctx: GradeContext
    ) -> SWEGrade:
        patch_error = record.final("model_patch_error")
        try:
            spec = env.unwrapped.sandbox_spec(task)  # type: ignore[attr-defined]
            grade = await grade_swe(ctx.pool, spec, task, record.final("model_patch"))
        except SandboxError as e:
            if e.fault != "agent":
                raise InfraError(f"grading failed: {type(e).__name__}: {e}") from e
            # The grading sandbox ran the patch's code, and that code made it fail.
            grade = SWEGrade.unresolved(f"tests_crashed_sandbox: {e}", patch_applied=True)
        if patch_error and grade.error == "no_patch":
            grade = grade.model_copy(update={"error": f"no_patch: {patch_error}"})
        return grade

    def ungraded_label(self, task: Task) -> str:
        return "NO" if swe_parts(task) is not None else ""

    def success_rule(self, suite: Suite) -> str:
        return "resolved (SWE-bench's FULL: every FAIL_TO_PASS and PASS_TO_PASS test passes)"

    def report_tables(self, results: Sequence[GradedResult]) -> list[ReportTable]:
        """SWE-bench's verdicts and the patches that applied neither way (runs of a code suite
        not made from SWE-bench instances, with no verdicts, have none)."""
        verdicts = Counter(r.grade for r in results if r.grade)
        if not verdicts:
            return []
        unapplied = sum((r.details.get("grade") or {}).get("error") == APPLY for r in results)
        return [
            ReportTable(
                "SWE-bench grades",
                [*VERDICTS, "patch apply failed"],
                [*(verdicts.get(v, 0) for v in VERDICTS), unapplied],
            )
        ]

    def predictions(self, path: str, tasks: list[Task], ctx: GradeContext) -> PredictionSource:
        if not all(swe_parts(t) for t in tasks):  # a code suite not made from SWE-bench instances
            return super().predictions(path, tasks, ctx)
        return Predictions(path)


def swe_grade(grade: SWEGrade, model_patch: str | None) -> Grade:
    """The hook's grade of an SWE-bench report: resolved or not, the report in the details
    (and `grade.json`), the whole harness log as `test.log`, and for a patch that applied
    neither way, its own unresolved kind and why: where the first hunk that failed is (file,
    line, the hunk's header; or what git said), the hunk itself under it."""
    details: dict[str, Any] = {"grade": grade.model_dump(exclude={"log"})}
    files: dict[str, str | bytes] = {
        "grade.json": json.dumps(details["grade"], indent=1, ensure_ascii=False, default=str),
        "test.log": grade.log,
    }
    kind = why = hunk_text = ""
    if grade.error == APPLY:
        hunk = first_failing_hunk(grade.log, model_patch)
        where = hunk.summary() if hunk is not None else ""
        if hunk is not None:
            details["first_failing_hunk"] = {**hunk.as_dict(), "summary": where}
            hunk_text = hunk.text
        kind, why = PATCH_APPLY, "patch did not apply" + (f": {where}" if where else "")
    return Grade(
        float(grade.resolved),
        grade.resolved,
        grade.status,
        details,
        files,
        error=grade.error or "",
        unresolved_kind=kind,
        why=why,
        why_text=hunk_text,
    )


class Predictions:
    """A predictions file: no episode is played, an instance's "episode" is its predicted patch."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.rows = load_predictions(path)

    def select(self, tasks: list[Task]) -> list[Task]:
        return select_predicted(tasks, self.rows, self.path)

    async def run(self, env: gymnasium.Env, task: Task, sample: int, max_turns: int) -> EpisodeRecord:
        pred = self.rows[task.id]
        return EpisodeRecord(
            messages=[],
            infos=[{"model_patch": pred.get("model_patch") or ""}],
            rewards=[],
            terminated=True,
            extra={"model_name_or_path": pred.get("model_name_or_path")},
        )

    async def close(self) -> None:
        return None

    def report(self, console: Any, results: Sequence[Any], run_dir: Path) -> dict[str, Any] | None:
        return None


def instance_images_here(backend: SandboxBackend, tasks: list[Task], repos_dirs: list[str]) -> list[Task]:
    """`with_instance_images` on `backend`, blocking: what each sandbox node runs (in a thread
    of its actor) to build the images of `tasks` on its own engine."""
    return asyncio.run(with_instance_images(tasks, backend, repos_dirs))


async def images_on_each_node(pool: Any, tasks: list[Task], repos_dirs: list[str]) -> list[Task]:
    """`tasks` on their instance images, built on every node of a `RaySandboxPool` (a
    sandbox runs on whichever node has room). `repos_dirs` are paths on the nodes."""
    per_node: dict[str, list[Task]] = await pool.on_each_node(instance_images_here, tasks, repos_dirs)
    return same_on_every_node(
        per_node,
        "different instance images (a node on Docker, another on bubblewrap, or different repos_dir "
        "contents): give every node the same backend and the same repositories, or run with swe.images=off",
    )
