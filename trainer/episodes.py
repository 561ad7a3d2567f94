"""What the trainer asks of tasks and envs: a deterministic task stream, evaluation runs,
and demonstrations for the warm start.

    task_at = task_stream("arborl.tasks.tool_mini:generate_tool_tasks", size=20000, seed=0)
    task_at(12345)        # the same task for the same index, run after run (resume relies on it)
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium

from arborl.agents import Agent, AgentEpisode, Trajectory
from arborl.tasks import get_suite
from arborl.tasks.suites import resolve


def task_stream(
    spec: str, size: int, seed: int, options: dict[str, Any] | None = None
) -> Callable[[int], Any]:
    """Index → task: ``spec`` is ``'module:function'`` (called as ``f(size, seed, **options)``)
    or ``'suite:<name>'``. The list is cycled, reshuffled each pass with a seeded RNG."""
    if spec.startswith("suite:"):
        if options:
            raise ValueError(f"options {sorted(options)} are for a generator; {spec} is a fixed suite")
        tasks = get_suite(spec.removeprefix("suite:")).tasks()
    else:
        tasks = list(resolve(spec)(size, seed, **(options or {})))
    if not tasks:
        raise ValueError(f"{spec} gave no tasks")
    orders: dict[int, list[int]] = {}

    def task_at(index: int) -> Any:
        epoch, pos = divmod(index, len(tasks))
        if epoch not in orders:
            order = list(range(len(tasks)))
            random.Random(seed * 1_000_003 + epoch).shuffle(order)
            orders[epoch] = order
        return tasks[orders[epoch][pos]]

    return task_at


async def run_many(
    agent: Agent,
    env_factory: Callable[[], gymnasium.Env],
    tasks: Sequence[Any],
    *,
    concurrency: int = 16,
    demo: Callable[[Any], Any] | None = None,
) -> list[AgentEpisode]:
    """Run one episode per task, `concurrency` at a time (a demo policy factory replays
    scripted solutions instead of sampling)."""
    envs = [env_factory() for _ in range(min(concurrency, len(tasks)))]
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(tasks)):
        queue.put_nowait(i)
    results: dict[int, AgentEpisode] = {}

    async def worker(env: gymnasium.Env) -> None:
        while not queue.empty():
            i = queue.get_nowait()
            policy = demo(tasks[i]) if demo is not None else None
            results[i] = await agent.run_episode(env, tasks[i], group_id=f"eval-{i}", demo=policy)

    try:
        await asyncio.gather(*(worker(env) for env in envs))
    finally:
        for env in envs:
            close = getattr(env.unwrapped, "aclose", None)
            if close is not None:
                await close()
    return [results[i] for i in range(len(tasks))]


def success_metrics(episodes: Sequence[AgentEpisode], tasks: Sequence[Any] = ()) -> dict[str, float]:
    """Success rate and shape of a set of episodes (an evaluation's headline numbers); with
    the tasks, also the success rate per task kind (`success/<kind>`, from the task's
    ``metadata["kind"]``) where tasks say theirs."""
    trajs: list[Trajectory] = [e.trajectory for e in episodes]
    n = max(1, len(trajs))
    kinds: dict[str, list[bool]] = {}
    for task, t in zip(tasks, trajs, strict=False):  # no tasks given: no kinds
        kind = (getattr(task, "metadata", None) or {}).get("kind")
        if kind:
            kinds.setdefault(str(kind), []).append(t.outcome_reward > 0)
    return {
        **{f"success/{k}": sum(v) / len(v) for k, v in sorted(kinds.items())},
        "success": sum(t.outcome_reward > 0 for t in trajs) / n,
        "reward": sum(t.outcome_reward for t in trajs) / n,
        "turns": sum(len(t.turns) for t in trajs) / n,
        "response_tokens": sum(t.num_response_tokens for t in trajs) / n,
        "truncated": sum(t.truncation is not None for t in trajs) / n,
        "errors": sum(e.error is not None for e in episodes) / n,
    }
