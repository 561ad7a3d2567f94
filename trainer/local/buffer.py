"""A bounded buffer of finished rollout groups between the rollout workers and the learner.

    buffer = GroupBuffer(capacity=32, max_staleness=2, order="dispatch")
    buffer.expect(index)                           # the rollouts dispatched group `index`
    await buffer.put(group)                        # waits while full: back-pressure on rollouts
    batch = await buffer.take(8, version=v)        # waits for 8 usable groups

Every sampled token knows the policy version that produced it. A group's staleness at
version ``v`` is ``v - (oldest version among its sampled tokens)``: with partial rollouts a
trajectory can mix versions, and its oldest tokens are the most off-policy. Demonstration
tokens (version -1) do not count.

**Admission** (``order="dispatch"``, async mode's default): batches are taken in the order the
groups were dispatched, so the learner waits for the oldest group still running instead of
training on the groups that happened to finish first. The rollouts dispatch at most
``max_staleness`` batches ahead of the learner (`rollout.dispatch_limit`), so a group taken in
dispatch order is never staler than the bound: nothing is started that would arrive too late
(AReaL's and ROLL Flash's admission control). With ``order="arrival"`` the fastest groups are
taken first; slow episodes (long SWE runs, hard rooms) are then the ones that go stale, and
dropping them leans training towards what finishes fast.

Groups staler than ``max_staleness`` all the same (arrival order, or a bound lowered while
groups ran) are kept with their advantages scaled by ``decay ** (staleness - max_staleness)``
(``stale="downweight"``, the default) or dropped (``stale="drop"``). Dropped groups are
counted (``dropped``) and announced (`on_drop`) so that the rollouts start a group in each
one's place: the dispatch limit counts every index dispatched, so without it a dropped group
would leave the learner a group short for good.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
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

    @property
    def tokens(self) -> int:
        """Sampled (response) tokens of the group."""
        return sum(t.num_response_tokens for t in self.trajectories)


@dataclass
class TakeStats:
    """What one `take` saw: the staleness of the groups taken, what it down-weighted and what
    it dropped, in groups and in sampled tokens."""

    staleness: Counter[int] = field(default_factory=Counter)
    dropped: list[int] = field(default_factory=list)  # indices of groups dropped as too stale
    dropped_tokens: int = 0
    downweighted: list[int] = field(default_factory=list)  # kept, with a weight below 1
    downweighted_tokens: int = 0
    tokens: int = 0  # of the groups taken (kept)


class GroupBuffer:
    """Finished groups with a capacity (back-pressure), an order and a staleness rule."""

    def __init__(
        self,
        capacity: int,
        max_staleness: int | None = None,
        stale: Literal["drop", "downweight"] = "downweight",
        decay: float = 0.5,
        order: Literal["dispatch", "arrival"] = "arrival",
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        if order not in ("dispatch", "arrival"):
            raise ValueError(f"order must be 'dispatch' or 'arrival', not {order!r}")
        self.capacity, self.max_staleness, self.stale, self.decay = capacity, max_staleness, stale, decay
        self.order = order
        self.dropped = 0  # groups dropped as too stale in this run (a resumed run sets it)
        self._groups: list[Group] = []
        self._expected: set[int] = set()  # dispatched, not yet put (order="dispatch")
        self._on_drop: list[Callable[[], Awaitable[None]]] = []
        self._changed = asyncio.Condition()

    def __len__(self) -> int:
        return len(self._groups)

    def indices(self) -> list[int]:
        """Task indices of the groups waiting (what a checkpoint records)."""
        return [g.index for g in self._groups]

    def on_drop(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Await `callback()` after each group dropped as too stale (the rollouts re-check their
        dispatch limit, which a drop raises by one)."""
        self._on_drop.append(callback)

    def expect(self, index: int) -> None:
        """Group `index` was dispatched: in dispatch order, no later group is taken before it
        arrives (or is `forget`-ten)."""
        if self.order == "dispatch":
            self._expected.add(index)

    async def forget(self, index: int) -> None:
        """Group `index` will not arrive (no episode of it ran): stop waiting for it."""
        async with self._changed:
            self._expected.discard(index)
            self._changed.notify_all()

    def _admits(self, group: Group) -> bool:
        # The oldest group still expected is admitted past the capacity: the learner waits for
        # it, so holding it back behind a full buffer of later groups would deadlock.
        if len(self._groups) < self.capacity:
            return True
        return self.order == "dispatch" and group.index <= min(self._expected, default=group.index)

    async def put(self, group: Group) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self._admits(group))
            self._append(group)
            self._changed.notify_all()

    def put_nowait(self, group: Group) -> None:
        """Add without waiting (restoring a buffer at resume may exceed the capacity once)."""
        self._append(group)

    def _append(self, group: Group) -> None:
        self._expected.discard(group.index)
        self._groups.append(group)

    def _next(self) -> Group | None:
        """The group to take now, if any: the first to arrive, or in dispatch order the lowest
        index once no lower one is still running."""
        if not self._groups:
            return None
        if self.order == "arrival":
            return self._groups[0]
        first = min(self._groups, key=lambda g: g.index)
        return first if first.index < min(self._expected, default=first.index + 1) else None

    async def take(self, n: int, version: int) -> tuple[list[Group], TakeStats]:
        """The next `n` usable groups at policy `version` (waits for them)."""
        stats = TakeStats()
        taken: list[Group] = []
        while len(taken) < n:
            async with self._changed:
                await self._changed.wait_for(lambda: self._next() is not None)
                group = self._next()
                assert group is not None
                self._groups.remove(group)
                self._changed.notify_all()
            s = group.staleness(version)
            if self.max_staleness is not None and s > self.max_staleness:
                if self.stale == "drop":
                    stats.dropped.append(group.index)
                    stats.dropped_tokens += group.tokens
                    self.dropped += 1
                    for callback in self._on_drop:
                        await callback()
                    continue
                group.weight = self.decay ** (s - self.max_staleness)
                stats.downweighted.append(group.index)
                stats.downweighted_tokens += group.tokens
            stats.staleness[s] += 1
            stats.tokens += group.tokens
            taken.append(group)
        return taken, stats
