"""Episodes of a text policy, and many of them concurrently on one event loop (no process per env).

    episodes = await run_episodes(envs, policy, tasks, max_turns=30)
    episodes = run_episodes_sync(envs, policy, tasks)       # from sync code

Each env is a worker taking the next task from a shared queue, so 64 tasks on 8 envs run
8 at a time; with envs over one `SandboxPool` the pool bounds the sandboxes. A policy is
`async (messages, info) -> reply` (a sync callable works too); it sees the conversation so
far. A policy or env error ends that episode (recorded in `Episode.error`), not the run,
and the env's sandbox goes back to the pool after every episode.

The pieces others build on: `play_episode` (the loop: reset, reply, step, record; the eval's
policy driver runs it too) and `on_envs` (the bounded worker queue; `Agent.run_episodes` and
the eval runner use it with their own per-item work).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import gymnasium

from arborl.tasks import Policy

from .aio import afinish, arelease, areset, astep
from .event_loop import get_env_loop
from .spaces import observation_messages

log = logging.getLogger(__name__)
W = TypeVar("W")  # a worker: an env, or a slot holding one
T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Episode:
    """One finished episode."""

    task_id: str
    messages: list[dict[str, str]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    error: str | None = None

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))

    @property
    def turns(self) -> int:
        return len(self.rewards)


class PolicyError(RuntimeError):
    """The policy raised (not the env); the policy's exception is the cause."""


async def _reply(policy: Policy, messages: list[dict[str, str]], info: dict[str, Any]) -> str:
    try:
        out = policy(list(messages), info)
        return await out if inspect.isawaitable(out) else out
    except Exception as e:
        raise PolicyError(f"{type(e).__name__}: {e}") from e


async def play_episode(
    env: gymnasium.Env, policy: Policy, task: Any, ep: Episode, *, max_turns: int, seed: int | None = None
) -> None:
    """The episode loop of a text policy: reset `env` on `task`, then reply, step, record
    into `ep`, until the env ends the episode (``ep.terminated`` / ``ep.truncated`` set) or
    `max_turns` replies were made (both left False: the caller scores the state). Raises
    what the env raises, and `PolicyError` when the policy does; `ep` holds what happened
    until then. `run_episode` and the eval's policy driver both run episodes through it."""
    obs, info = await areset(env, seed=seed, options={"task": task} if task is not None else None)
    ep.messages.extend(observation_messages(obs))
    ep.infos.append(info)
    for _ in range(max_turns):
        reply = str(await _reply(policy, ep.messages, info))
        ep.messages.append({"role": "assistant", "content": reply})
        obs, reward, terminated, truncated, info = await astep(env, reply)
        ep.messages.extend(observation_messages(obs))
        ep.rewards.append(float(reward))
        ep.infos.append(info)
        if terminated or truncated:
            ep.terminated, ep.truncated = bool(terminated), bool(truncated)
            return


async def run_episode(
    env: gymnasium.Env, policy: Policy, task: Any = None, *, max_turns: int = 50, seed: int | None = None
) -> Episode:
    """Run one episode to its end (or `max_turns`, then scored like a turn limit)."""
    task_id = getattr(task, "id", None) or (task.get("id") if isinstance(task, dict) else None) or ""
    ep = Episode(task_id=str(task_id))
    try:
        await play_episode(env, policy, task, ep, max_turns=max_turns, seed=seed)
        if not (ep.terminated or ep.truncated):
            bonus, extra = await afinish(env)
            if ep.rewards:
                ep.rewards[-1] += bonus
            ep.infos[-1] = {**ep.infos[-1], **extra, "truncated_by": "runner_max_turns"}
            ep.truncated = True
    except Exception as e:
        cause = e.__cause__ if isinstance(e, PolicyError) and e.__cause__ is not None else e
        log.warning("episode of %s failed: %s: %s", ep.task_id, type(cause).__name__, cause)
        ep.error = f"{type(cause).__name__}: {cause}"
        ep.truncated = True
        try:
            await afinish(env)
        except Exception as e2:  # the env is in trouble already; the episode is recorded
            log.debug("finishing the failed episode also failed: %s", e2)
    finally:
        await arelease(env)
    return ep


async def on_envs(envs: Sequence[W], items: Iterable[T], run: Callable[[W, int, T], Awaitable[R]]) -> list[R]:
    """The bounded worker queue: each of `envs` runs ``run(env, index, item)`` on the next
    item until none is left, so `len(envs)` items run at a time; results in item order.
    Everything that runs many episodes (here, `Agent.run_episodes`, the eval runner) uses it."""
    queue: asyncio.Queue[tuple[int, T]] = asyncio.Queue()
    for item in enumerate(items):
        queue.put_nowait(item)
    results: dict[int, R] = {}

    async def worker(env: W) -> None:
        while True:
            try:
                i, item = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            results[i] = await run(env, i, item)

    await asyncio.gather(*(worker(env) for env in envs))
    return [results[i] for i in sorted(results)]


async def run_episodes(
    envs: Sequence[gymnasium.Env], policy: Policy, tasks: Iterable[Any], *, max_turns: int = 50
) -> list[Episode]:
    """Run every task on the first free env, `len(envs)` at a time; results in task order."""
    return await on_envs(
        envs, tasks, lambda env, _, task: run_episode(env, policy, task, max_turns=max_turns)
    )


def run_episodes_sync(
    envs: Sequence[gymnasium.Env], policy: Policy, tasks: Iterable[Any], *, max_turns: int = 50
) -> list[Episode]:
    """`run_episodes` from sync code, on the env event loop (where default pools live)."""
    return get_env_loop().run(run_episodes(envs, policy, list(tasks), max_turns=max_turns))
