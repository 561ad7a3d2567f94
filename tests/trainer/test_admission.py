"""Admission instead of dropping (issue 53 §1): in dispatch order the learner waits for the
oldest group still running, so slow episodes keep their share of training; groups dropped as
too stale are replaced, so the rollouts never stall short of a batch.

The rollouts here are `RolloutManager`'s own, driven by an agent whose episodes take wall time
by task (odd tasks are slow, as long SWE runs or hard rooms are) and a learner loop that takes
batches and advances the version as `Reinforce` does."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from arborl.agents.trajectory import Trajectory, Turn
from arborl.trainer.local.buffer import Group, GroupBuffer
from arborl.trainer.local.config import AsyncConfig
from arborl.trainer.local.rollout import RolloutManager, dispatch_limit


def group(index: int, version: int = 0, tokens: int = 1) -> Group:
    turn = Turn(
        response_ids=[2] * tokens, response_logprobs=[0.0] * tokens, policy_versions=[version] * tokens
    )
    return Group(index, [Trajectory(prompt_ids=[1], turns=[turn])])


async def settles(task: asyncio.Task[Any]) -> bool:
    await asyncio.sleep(0.02)
    return task.done()


async def test_dispatch_order_waits_for_the_oldest_group_still_running():
    buffer = GroupBuffer(capacity=8, order="dispatch")
    for i in range(3):
        buffer.expect(i)
    await buffer.put(group(2))
    await buffer.put(group(1))
    take = asyncio.create_task(buffer.take(1, version=0))
    assert not await settles(take)  # 1 and 2 are done, 0 is not: the learner waits for it
    await buffer.put(group(0))
    taken, _ = await asyncio.wait_for(take, 1)
    assert [g.index for g in taken] == [0]
    taken, _ = await buffer.take(2, version=0)
    assert [g.index for g in taken] == [1, 2]


async def test_arrival_order_takes_the_first_to_finish():
    buffer = GroupBuffer(capacity=8, order="arrival")
    for i in range(3):
        buffer.expect(i)
    await buffer.put(group(2))
    await buffer.put(group(1))
    taken, _ = await asyncio.wait_for(buffer.take(2, version=0), 1)
    assert [g.index for g in taken] == [2, 1]


async def test_the_oldest_group_is_admitted_past_a_full_buffer():
    """A full buffer of later groups must not hold back the group the learner waits for."""
    buffer = GroupBuffer(capacity=2, order="dispatch")
    for i in range(4):
        buffer.expect(i)
    await buffer.put(group(3))
    await buffer.put(group(2))
    later = asyncio.create_task(buffer.put(group(1)))
    assert not await settles(later)  # full, and 1 is not the oldest expected: back-pressure
    await asyncio.wait_for(buffer.put(group(0)), 1)  # the oldest: admitted at once
    taken, _ = await asyncio.wait_for(buffer.take(4, version=0), 1)
    await later
    assert [g.index for g in taken] == [0, 1, 2, 3]


async def test_a_group_that_will_not_arrive_is_forgotten():
    buffer = GroupBuffer(capacity=4, order="dispatch")
    buffer.expect(0)
    buffer.expect(1)
    await buffer.put(group(1))
    take = asyncio.create_task(buffer.take(1, version=0))
    assert not await settles(take)
    await buffer.forget(0)  # group 0 came back with no episode that ran
    taken, _ = await asyncio.wait_for(take, 1)
    assert [g.index for g in taken] == [1]


async def test_take_counts_groups_and_tokens_kept_downweighted_and_dropped():
    dropped: list[int] = []
    buffer = GroupBuffer(capacity=8, max_staleness=1, stale="drop")

    async def on_drop() -> None:
        dropped.append(buffer.dropped)

    buffer.on_drop(on_drop)
    for i, (v, n) in enumerate([(5, 3), (2, 7), (4, 5)]):  # staleness at 5: 0, 3, 1
        buffer.put_nowait(group(i, v, n))
    taken, stats = await buffer.take(2, version=5)
    assert [g.index for g in taken] == [0, 2] and stats.tokens == 8
    assert stats.dropped == [1] and stats.dropped_tokens == 7 and dropped == [1]

    buffer = GroupBuffer(capacity=8, max_staleness=1, stale="downweight", decay=0.5)
    for i, (v, n) in enumerate([(5, 3), (2, 7)]):
        buffer.put_nowait(group(i, v, n))
    taken, stats = await buffer.take(2, version=5)
    assert [g.weight for g in taken] == [1.0, 0.25]
    assert stats.downweighted == [1] and stats.downweighted_tokens == 7 and stats.tokens == 10
    assert not stats.dropped and buffer.dropped == 0


def test_the_order_must_be_known():
    with pytest.raises(ValueError, match="order"):
        GroupBuffer(capacity=1, order="fastest")  # type: ignore[arg-type]


# ---- the rollouts and a learner loop ---------------------------------------------------------
SLOW_S, FAST_S, TRAIN_S = 0.25, 0.01, 0.03


class TimedAgent:
    """Episodes that take wall time by task: odd tasks are slow (and longer in tokens). Each
    samples its tokens under the version current when it starts."""

    def __init__(self, clock: SimpleNamespace) -> None:
        self.clock = clock

    async def run_episode(self, env: Any, task: dict[str, Any], group_id: str, gate: Any) -> Any:
        version = self.clock.version
        await asyncio.sleep(SLOW_S if task["slow"] else FAST_S)
        n = 6 if task["slow"] else 2
        turn = Turn(response_ids=[2] * n, response_logprobs=[0.0] * n, policy_versions=[version] * n)
        return SimpleNamespace(segments=[Trajectory(prompt_ids=[1], turns=[turn])], error=None)


async def learn(order: str, stale: str, steps: int = 10, groups_per_step: int = 4) -> dict[str, Any]:
    """Train `steps` steps (each a short sleep) on groups from the real rollout manager; what
    was dispatched, trained and dropped."""
    clock = SimpleNamespace(version=0)
    a = AsyncConfig(mode="async", max_staleness=1, max_groups_in_flight=16, order=order, stale=stale)
    buffer = GroupBuffer(capacity=16, max_staleness=1, stale=a.stale, order=a.order)
    manager = RolloutManager(
        TimedAgent(clock),  # type: ignore[arg-type]
        lambda: SimpleNamespace(unwrapped=SimpleNamespace()),
        lambda i: {"slow": i % 2 == 1},
        buffer,
        SimpleNamespace(put=lambda index, trajs: None),  # type: ignore[arg-type]
        group_size=2,
        limit=lambda: dispatch_limit(a, groups_per_step, clock.version),
        max_in_flight=a.max_groups_in_flight,
    )
    runner = asyncio.create_task(manager.run())
    trained: list[Group] = []
    dropped: list[int] = []
    staleness: list[int] = []
    try:
        for _ in range(steps):
            groups, stats = await asyncio.wait_for(buffer.take(groups_per_step, clock.version), 10)
            trained += groups
            dropped += stats.dropped
            staleness += list(stats.staleness.elements())
            await asyncio.sleep(TRAIN_S)
            clock.version += 1
            await manager.notify()
        await asyncio.sleep(0.005)  # the rollouts dispatch up to the limit the last step set
        ahead = manager.dispatched - len(trained) - len(dropped)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    sampled = [g.index for g in trained] + dropped  # every group that finished and reached the learner
    return {
        "trained_slow": sum(g.index % 2 for g in trained) / len(trained),
        "sampled_slow": sum(i % 2 for i in sampled) / len(sampled),
        "dropped": dropped,
        "max_staleness": max(staleness),
        "weights": [g.weight for g in trained],
        "ahead": ahead,  # groups dispatched that the learner has not consumed yet
    }


async def test_admission_keeps_slow_episodes_share_of_training():
    """The issue's test: episodes that differ in length; in dispatch order the slow ones' share
    of training equals their share of sampling (tolerance: 0, as nothing is dropped) and no
    group is staler than the bound. Taking the first to finish and dropping the stale, as
    arborl did before, trains on far fewer slow episodes than it samples (the bias)."""
    admitted = await learn("dispatch", "drop")
    assert admitted["dropped"] == [] and admitted["max_staleness"] <= 1
    assert admitted["trained_slow"] == pytest.approx(0.5, abs=0.05)  # half the tasks are slow
    assert abs(admitted["trained_slow"] - admitted["sampled_slow"]) <= 0.05

    dropping = await learn("arrival", "drop")
    assert dropping["dropped"], "the slow groups should have gone stale in arrival order"
    assert all(i % 2 == 1 for i in dropping["dropped"])  # what goes stale is the slow episodes
    assert dropping["sampled_slow"] - dropping["trained_slow"] >= 0.1


async def test_downweighting_keeps_the_late_groups_with_a_weight():
    late = await learn("arrival", "downweight")
    assert late["dropped"] == [] and late["max_staleness"] > 1
    assert min(late["weights"]) < 1.0  # kept, scaled by decay ** (staleness - bound)


async def test_dropped_groups_are_replaced_so_the_rollouts_keep_running_ahead():
    """The dispatch limit counts every index dispatched: before the fix a dropped group was
    never replaced, so each drop lowered for good how far the rollouts run ahead of the learner
    (the run slid towards sync, and would stall once the drops outnumbered the run-ahead). With
    replacement the rollouts stay `max_staleness + 1` batches ahead however many were dropped."""
    run = await asyncio.wait_for(learn("arrival", "drop", steps=20, groups_per_step=2), 60)
    assert run["dropped"]
    assert run["ahead"] == (1 + 1) * 2  # (max_staleness + 1) batches of 2 groups
