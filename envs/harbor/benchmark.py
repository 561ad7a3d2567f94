"""How `arborl eval` runs a Harbor suite (`arborl.envs.benchmarks`): images first, then grades.

- `prepare` builds every task's image before any episode (Docker; with sandbox=ray on every
  node's engine, which must agree on the tags), one task at a time; a task
  whose image cannot be built offline keeps the reason (`image_error`: the Dockerfile's line
  and docker's words) and is recorded as an infrastructure error when its turn comes, never a
  0, while the others run. A task folder that could not be read is an environment error
  naming its file (the env raises `HarborTaskError` at reset).
- `grade` reads the verdict the env's tests gave (`grading.py`): the score is the reward
  test.sh wrote, clipped to [0, 1]; an attempt whose tests wrote no reward or a bad one, or
  ran out of time, is the agent's 0 with its own kind. The gold run (solution/solve.sh) that
  does not reach the suite's success is the task's fault: `EnvironmentBroken`, with the
  tests' output.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium

from arborl.sandboxes import DockerBackend
from arborl.tasks import Suite, Task, episode_score
from arborl.tasks.harbor import HarborTask

from ..benchmarks import Benchmark, EnvironmentBroken, EpisodeRecord, Grade, GradeContext, same_on_every_node
from .images import HarborImageError, build_task_image

#: The verifier's own kinds of an unresolved attempt (`TestRun.error_kind`).
KINDS: Mapping[str, tuple[str, str]] = {
    "no_reward": ("test run without a reward", "test runs without a reward"),
    "bad_reward": ("unreadable reward", "unreadable rewards"),
    "tests_timeout": ("tests timeout", "tests timeouts"),
    "reward_tampered": ("reward written after the tests", "rewards written after the tests"),
}


def images_here(backend: Any, tasks: list[Task]) -> list[Task]:
    """`tasks` with their images built on `backend`'s engine (blocking): each usable Harbor
    task gets its image's tag and ENV, or the reason it cannot have one (`image_error`). What
    each sandbox node runs, in a thread of its actor, on its own engine."""
    out: list[Task] = []
    for task in tasks:
        if not isinstance(task, HarborTask) or not task.usable or task.image:
            out.append(task)
            continue
        if not isinstance(backend, DockerBackend):
            out.append(task)  # the env says at reset what it needs
            continue
        try:
            image = build_task_image(backend.client, task)
        except HarborImageError as e:
            out.append(task.model_copy(update={"image_error": str(e)}))
            continue
        out.append(task.model_copy(update={"image": image.tag, "image_env": image.env}))
    return out


class HarborBenchmark(Benchmark):
    """The hook of `arborl/Harbor-v0` (see the module doc)."""

    name = "harbor"
    unresolved_kinds: ClassVar[Mapping[str, tuple[str, str]]] = KINDS

    async def prepare(self, tasks: list[Task], ctx: GradeContext) -> list[Task]:
        if hasattr(ctx.pool, "on_each_node"):  # a Ray pool: a sandbox runs on any node's engine
            per_node: dict[str, list[Task]] = await ctx.pool.on_each_node(images_here, tasks)
            return same_on_every_node(
                per_node,
                "different Harbor task images (a node without Docker, or different base images): "
                "give every node Docker and run `arborl sandbox build` on each",
            )
        backend = getattr(ctx.pool, "backend", None)
        if not isinstance(backend, DockerBackend):
            return tasks  # the env says at reset what it needs
        return await asyncio.to_thread(images_here, backend, tasks)

    async def grade(self, env: gymnasium.Env, task: Task, record: EpisodeRecord, ctx: GradeContext) -> Grade:
        verdict: dict[str, Any] = record.final("verifier") or {}
        env_error = record.final("env_error")
        if env_error and not verdict:  # grading itself failed (`GradingFailed`): no agent's 0
            raise EnvironmentBroken(f"task {task.id}: {env_error}")
        total = float(sum(record.rewards))
        kind = str(verdict.get("error_kind") or "")
        grade = Grade(
            score=episode_score(total),
            success=ctx.suite.success(total) and bool(verdict.get("graded")),
            details={"verifier": verdict} if verdict else {},
            files={"test-output.txt": str(verdict.get("output_tail") or "")} if verdict else {},
            error=kind,
            unresolved_kind=kind if kind in KINDS else "",
            why=str(verdict.get("error") or ""),
        )
        if ctx.agent == "gold" and not grade.success:
            why = verdict.get("error") or (
                f"the tests gave reward {verdict.get('reward')}"
                if verdict
                else "the episode was never graded"
            )
            tail = str(verdict.get("output_tail") or "")[-1500:]
            raise EnvironmentBroken(
                f"task {task.id}: the gold run (solution/solve.sh) does not pass: {why}"
                + (f"\ntests' output:\n{tail}" if tail else ""),
                grade=grade,
            )
        return grade

    def success_rule(self, suite: Suite) -> str:
        return f"the reward tests/test.sh writes reaches {suite.success_score:g}"
