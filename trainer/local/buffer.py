"""A bounded buffer of finished rollout groups between the rollout workers and the learner.

    buffer = GroupBuffer(capacity=32, max_staleness=2, stale="drop")
    await buffer.put(group)                        # waits while full: back-pressure on rollouts
    batch = await buffer.take(8, version=v)        # waits for 8 usable groups

Every sampled token knows the policy version that produced it. A group's staleness at
version ``v`` is ``v - (oldest version among its sampled tokens)``: with partial rollouts a
trajectory can mix versions, and its oldest tokens are the most off-policy. Groups staler
than ``max_staleness`` are dropped (``stale="drop"``, recorded) or kept with their
advantages scaled by ``decay ** (staleness - max_staleness)`` (``stale="downweight"``).
Demonstration tokens (version -1) do not count.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from arborl.agents.trajectory import Trajectory


@dataclass
class Group:
    """The episodes of one task (a GRPO group, or a tree's leaves), by task index."""

    index: int
    trajectories: list[Trajectory]
    weight: float = 1.0  # multiplies the group's advantages (down-weighted stale groups)

    @property
    def oldest_version(self) -> int | None:
        versions = [v for t in self.trajectories for turn in t.turns for v in turn.policy_versions if v >= 0]
        return min(versions) if versions else None

    def staleness(self, version: int) -> int:
        oldest = self.oldest_version
        return 0 if oldest is None else max(0, version - oldest)


@dataclass
class TakeStats:
    """What one `take` saw: staleness of the groups taken, and what it dropped."""

    staleness: Counter[int] = field(default_factory=Counter)
    dropped: list[int] = field(default_factory=list)  # indices of groups dropped as too stale


class GroupBuffer:
    """FIFO of finished groups with a capacity (back-pressure) and a staleness rule."""

    def __init__(
        self,
        capacity: int,
        max_staleness: int | None = None,
        stale: Literal["drop", "downweight"] = "drop",
        decay: float = 0.5,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity, self.max_staleness, self.stale, self.decay = capacity, max_staleness, stale, decay
        self._groups: list[Group] = []
        self._changed = asyncio.Condition()

    def __len__(self) -> int:
        return len(self._groups)

    def indices(self) -> list[int]:
        """Task indices of the groups waiting (what a checkpoint records)."""
        return [g.index for g in self._groups]

    async def put(self, group: Group) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: len(self._groups) < self.capacity)
            self._groups.append(group)
            self._changed.notify_all()

    def put_nowait(self, group: Group) -> None:
        """Add without waiting (restoring a buffer at resume may exceed the capacity once)."""
        self._groups.append(group)

    async def take(self, n: int, version: int) -> tuple[list[Group], TakeStats]:
        """The next `n` usable groups at policy `version` (waits for them), oldest first."""
        stats = TakeStats()
        taken: list[Group] = []
        while len(taken) < n:
            async with self._changed:
                await self._changed.wait_for(lambda: bool(self._groups))
                group = self._groups.pop(0)
                self._changed.notify_all()
            s = group.staleness(version)
            if self.max_staleness is not None and s > self.max_staleness:
                if self.stale == "drop":
                    stats.dropped.append(group.index)
                    continue
                group.weight = self.decay ** (s - self.max_staleness)
            stats.staleness[s] += 1
            taken.append(group)
        return taken, stats
