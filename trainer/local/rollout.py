"""Rollout workers: groups of episodes in flight, finished groups stored, then buffered.

    manager = RolloutManager(agent, env_factory, task_at, buffer, store, group_size=8,
                             limit=lambda: (version + 1) * 8, max_in_flight=12)
    runner = asyncio.create_task(manager.run())

A *group* is `group_size` episodes of one task (index ``i`` of the task stream), run
concurrently on one event loop (no process per env). An episode whose context changed
(sliding window, summary) is several trajectories, its segments, sharing an `episode_id`. When all of them end, the group is
written to the store (so a crash loses nothing collected) and put in the buffer.

How many groups may be started is `limit()` (total indices dispatched), which is how the
trainer expresses its mode (`dispatch_limit`, `max_in_flight` and `max_staleness` below
compute it from the config); `notify()` re-checks it:

- sync:            limit = (version + 1) * groups_per_step — exactly one batch per version;
- sync + partial:  one batch plus over-provisioned groups; the `gate` closes while the
                   learner updates, so unfinished episodes wait between turns and resume
                   with the new weights (APRIL);
- async:           limit = (version + max_staleness + 1) * groups_per_step — generation runs
                   ahead of the learner by at most `max_staleness` versions (AReaL; lowered
                   while the batches' ESS is low, `staleness.StalenessBound`); episodes
                   run on across weight pushes (no gate), each token keeping its version
                   (partial rollouts are a sync-mode option: the config refuses them here).
                   Each dispatched index is announced to the buffer (`GroupBuffer.expect`),
                   which with `async.order=dispatch` hands the learner groups in this order,
                   so none is staler than the bound (admission, not dropping).

Groups that come back empty and groups the buffer drops as too stale are replaced: the limit is
raised by their number.

Episodes that failed for infrastructure reasons (engine or env errors, a sandbox that failed
without the agent's doing) are left out of their group (recorded); the model is not trained on
faults that are not its own. A sandbox the agent itself exhausted or killed ("sandbox_crash")
is its failure and is trained on with its reward, 0: dropping it would let a policy abstain
from a task it would fail by crashing the sandbox. A group left with
no episode is replaced by a fresh one (the learner's batch would otherwise never fill), and
`max_failed_groups` such groups in a row stop the run with a `RolloutError` naming the last
failure: a dead engine or env fails loudly instead of hanging the trainer.

Sampling is seeded (`run.seed`): the group id is the task's index (``group-<index>``, not a
random id) and the `Agent` gives each episode of a group its own seed (its place in the
group: `Agent._sampling`), so the same seed
samples the same episodes again (sync mode; in async mode the weights an episode sees depend
on timing).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium

from arborl.agents import Agent, Trajectory
from arborl.agents.harnesses.runner import MiniSweAgentRunner
from arborl.agents.trajectory import episodes_of
from arborl.agents.tree_rollout import TreeConfig, TreeRollout

from .buffer import Group, GroupBuffer
from .config import AsyncConfig
from .trajectory_store import TrajectoryStore

log = logging.getLogger(__name__)
INFRA_FAILURES = ("engine_error", "env_error", "sandbox_infra")


def dispatch_limit(a: AsyncConfig, groups_per_step: int, version: int, bound: int | None = None) -> int:
    """Task indices that may be dispatched in all while the policy is at `version`; `bound`:
    the async staleness bound now, when it is not `max_staleness` (`staleness.StalenessBound`)."""
    g = groups_per_step
    if a.mode == "async":
        return (version + (a.max_staleness if bound is None else bound) + 1) * g
    extra = math.ceil((a.overprovision - 1) * g) if a.partial_rollouts else 0
    return (version + 1) * g + extra


def max_in_flight(a: AsyncConfig, groups_per_step: int) -> int:
    """Groups generating at once: the async setting, else one batch over-provisioned."""
    return a.max_groups_in_flight if a.mode == "async" else math.ceil(groups_per_step * a.overprovision)


def max_staleness(a: AsyncConfig) -> int | None:
    """Versions a group may lag the learner before the buffer drops or down-weights it
    (None: unbounded)."""
    if a.mode == "sync":
        return None if a.partial_rollouts else 0  # partial rollouts resume across one update
    return a.max_staleness


class RolloutError(RuntimeError):
    """Rollouts keep failing for reasons that are not the model's (engine or env down)."""


@dataclass
class RolloutStats:
    groups_done: int = 0
    episodes_done: int = 0
    infra_failures: int = 0
    empty_groups: list[int] = field(default_factory=list)


class RolloutManager:
    """Dispatches task indices as groups of episodes, within `limit()` and `max_in_flight`."""

    def __init__(
        self,
        agent: Agent | MiniSweAgentRunner,
        env_factory: Callable[[], gymnasium.Env],
        task_at: Callable[[int], Any],
        buffer: GroupBuffer,
        store: TrajectoryStore,
        *,
        group_size: int,
        limit: Callable[[], int],
        max_in_flight: int,
        cursor: int = 0,
        redo: list[int] | None = None,
        tree: TreeConfig | None = None,
        max_failed_groups: int = 8,
    ) -> None:
        """With `tree`, a group is one rollout tree's leaves (`arborl.agents.tree_rollout`) instead of
        `group_size` independent episodes."""
        self.agent, self.env_factory, self.task_at = agent, env_factory, task_at
        self.buffer, self.store = buffer, store
        self.group_size, self.limit, self.max_in_flight = group_size, limit, max_in_flight
        self.cursor = cursor  # next fresh index
        self.redo = sorted(redo or [])  # indices to run again first (in flight when a run died)
        self.gate = asyncio.Event()
        self.gate.set()
        self.stats = RolloutStats()
        self._envs: list[gymnasium.Env] = []  # idle envs, reused by the next episode or branch
        self.trees = (
            TreeRollout(agent, self._env, tree, release=self._envs.append) if tree is not None else None
        )
        buffer.on_drop(self.notify)  # a dropped group makes room for a fresh one
        self._in_flight: dict[int, asyncio.Task[None]] = {}
        self._wake = asyncio.Condition()
        self._errors: list[BaseException] = []
        self.max_failed_groups = max_failed_groups
        self._failed_in_a_row = 0  # groups in a row with no episode that ran
        self._last_failure = ""

    # ---- control ------------------------------------------------------------------------
    async def notify(self) -> None:
        """Re-check the dispatch limit (call after the version changes)."""
        async with self._wake:
            self._wake.notify_all()

    def pause(self) -> None:
        """Episodes stop at their next turn boundary (their tokens so far are kept)."""
        self.gate.clear()

    def resume(self) -> None:
        self.gate.set()

    @property
    def dispatched(self) -> int:
        """Indices dispatched so far (what `limit()` is compared with)."""
        return self.cursor

    def in_flight(self) -> list[int]:
        return sorted(self._in_flight)

    # ---- the loop -----------------------------------------------------------------------
    async def run(self) -> None:
        """Dispatch groups until cancelled; raises if a group failed unexpectedly."""
        try:
            while True:
                async with self._wake:
                    await self._wake.wait_for(self._can_dispatch)
                if self._errors:
                    raise self._errors[0]
                indices = [self.redo.pop(0) if self.redo else self._next()]
                # Trees grown under one budget (tree.prompts > 1) are dispatched together.
                together = self.trees.config.prompts if self.trees is not None else 1
                while len(indices) < together and self._room(len(indices)):
                    indices.append(self.redo.pop(0) if self.redo else self._next())
                job = asyncio.create_task(self._groups(indices), name=f"group-{indices[0]}")
                for index in indices:
                    self._in_flight[index] = job
                    self.buffer.expect(index)
        finally:
            await self.stop()

    def _next(self) -> int:
        index = self.cursor
        self.cursor += 1
        return index

    def _can_dispatch(self) -> bool:
        return bool(self._errors) or self._room(0)

    def _room(self, pending: int) -> bool:
        """Whether one more group may start, with `pending` about to start already."""
        room = len(self._in_flight) + pending < self.max_in_flight
        # groups that came back empty or were dropped as too stale do not count: fresh ones
        # take their place (else the learner would wait for good for a batch that cannot fill)
        replaced = len(self.stats.empty_groups) + self.buffer.dropped
        return room and (bool(self.redo) or self.cursor < self.limit() + replaced)

    async def stop(self) -> None:
        """Cancel the groups in flight (their indices can be run again on resume)."""
        tasks = list(set(self._in_flight.values()))  # one task may run several groups
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._in_flight.clear()

    async def _gate(self) -> None:
        await self.gate.wait()

    def _env(self) -> gymnasium.Env:
        return self._envs.pop() if self._envs else self.env_factory()

    async def _episode(self, index: int, task: Any) -> list[Trajectory]:
        """The episode's segments: one, unless its context changed (`AgentConfig.context`) or
        an external harness rewrote its history (`rollout.harness`); none when it failed for
        infrastructure reasons."""
        env = self._env()
        try:
            ep = await self.agent.run_episode(env, task, group_id=f"group-{index}", gate=self._gate)
        finally:
            self._envs.append(env)
        trajs = ep.segments
        failed = next((t.truncation for t in trajs if t.truncation in INFRA_FAILURES), None)
        if failed is not None:
            self.stats.infra_failures += 1
            self._last_failure = f"{failed}: {ep.error}"
            log.warning("group %d: an episode failed (%s): %s; left out", index, failed, ep.error)
            return []
        for traj in trajs:
            traj.metrics["task_index"] = float(index)
        return list(trajs)

    async def _group(self, index: int) -> None:
        await self._groups([index])

    async def _groups(self, indices: list[int]) -> None:
        """Run the groups of `indices` (several only for trees grown under one budget), then
        store and buffer each."""
        try:
            tasks = [self.task_at(i) for i in indices]
            if self.trees is not None:
                results = await self.trees.run_many(tasks, [f"group-{i}" for i in indices])
                groups = []
                for index, result in zip(indices, results, strict=True):
                    trajs = [t for t in result.leaves if t.truncation not in INFRA_FAILURES]
                    # Leaves share their prefixes: each carries its share of what the tree
                    # sampled, so summing a batch counts every sampled token once.
                    share = result.generated_tokens / max(1, len(result.leaves))
                    for t in trajs:
                        t.metrics["task_index"] = float(index)
                        t.metrics["generated_tokens"] = share
                    groups.append(trajs)
            else:
                (index,), (task,) = indices, tasks
                episodes = await asyncio.gather(*(self._episode(index, task) for _ in range(self.group_size)))
                groups = [[t for trajs in episodes for t in trajs]]
            for index, trajs in zip(indices, groups, strict=True):
                await self._deliver(index, trajs)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug, not a model failure: stop the run loudly
            log.exception("group %s failed", indices)
            self._errors.append(e)
        finally:
            for index in indices:
                self._in_flight.pop(index, None)
            async with self._wake:
                self._wake.notify_all()

    async def _deliver(self, index: int, trajs: list[Trajectory]) -> None:
        """Store a finished group and put it in the buffer (an empty one is counted instead)."""
        self.stats.episodes_done += len(episodes_of(trajs))
        if not trajs:
            self.stats.empty_groups.append(index)
            await self.buffer.forget(index)
            self._failed_in_a_row += 1
            if self._failed_in_a_row >= self.max_failed_groups:
                raise RolloutError(
                    f"{self._failed_in_a_row} groups in a row had no episode that ran: "
                    f"the engine or env keeps failing (last: {self._last_failure or 'unknown'})"
                )
            return
        self._failed_in_a_row = 0
        group = Group(index, trajs)
        # Once its file is being written, the group must reach the buffer even if the run
        # stops now (the thread finishes the write regardless of a cancel): a stored group
        # that no checkpoint accounts for would be lost at resume.
        write = asyncio.ensure_future(asyncio.to_thread(self.store.put, index, trajs))
        try:
            await asyncio.shield(write)
            await self.buffer.put(group)  # no await after its append: cancelled means not queued
        except asyncio.CancelledError:
            await write
            self.buffer.put_nowait(group)  # past capacity once, at shutdown only
            raise
        self.stats.groups_done += 1

    async def close(self) -> None:
        await self.stop()
        for env in self._envs:
            close = getattr(env.unwrapped, "aclose", None)
            if close is not None:
                await close()
        self._envs.clear()
