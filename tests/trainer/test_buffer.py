"""GroupBuffer: staleness from the oldest sampled token, stale groups dropped or down-weighted,
back-pressure at capacity."""

from __future__ import annotations

import asyncio

import pytest

from arborl.agents.trajectory import Trajectory, Turn
from arborl.trainer.local.buffer import Group, GroupBuffer


def group(index: int, *versions: list[int]) -> Group:
    """A group with one trajectory per list of per-token policy versions (one turn each)."""
    trajs = [
        Trajectory(
            prompt_ids=[1],
            turns=[Turn(response_ids=[2] * len(v), response_logprobs=[0.0] * len(v), policy_versions=v)],
        )
        for v in versions
    ]
    return Group(index, trajs)


def test_staleness_counts_the_oldest_sampled_token_and_ignores_demonstrations():
    g = group(0, [3, 3], [2, 4], [-1, -1])  # a partial rollout (2 then 4) and a demonstration
    assert g.oldest_version == 2
    assert g.staleness(5) == 3 and g.staleness(1) == 0  # never negative
    assert group(1, [-1]).staleness(9) == 0  # demonstration tokens only: not stale


async def test_drop_skips_stale_groups_and_records_them():
    buffer = GroupBuffer(capacity=8, max_staleness=1, stale="drop")
    for i, v in enumerate([5, 3, 4, 2, 5]):  # staleness at version 5: 0, 2, 1, 3, 0
        buffer.put_nowait(group(i, [v]))
    taken, stats = await buffer.take(3, version=5)
    assert [g.index for g in taken] == [0, 2, 4]
    assert stats.dropped == [1, 3]
    assert stats.staleness == {0: 2, 1: 1}
    assert all(g.weight == 1.0 for g in taken) and len(buffer) == 0


async def test_downweight_keeps_stale_groups_with_decayed_weight():
    buffer = GroupBuffer(capacity=8, max_staleness=1, stale="downweight", decay=0.5)
    for i, v in enumerate([5, 4, 3, 1]):  # staleness 0, 1, 2, 4
        buffer.put_nowait(group(i, [v]))
    taken, stats = await buffer.take(4, version=5)
    assert [g.index for g in taken] == [0, 1, 2, 3]
    assert [g.weight for g in taken] == [1.0, 1.0, 0.5, 0.125]  # decay ** (staleness - max)
    assert stats.dropped == [] and stats.staleness == {0: 1, 1: 1, 2: 1, 4: 1}


async def test_unbounded_staleness_keeps_everything():
    buffer = GroupBuffer(capacity=4, max_staleness=None)
    buffer.put_nowait(group(0, [0]))
    taken, stats = await buffer.take(1, version=100)
    assert taken[0].weight == 1.0 and stats.staleness == {100: 1} and not stats.dropped


async def test_put_waits_at_capacity_and_take_waits_for_enough_groups():
    buffer = GroupBuffer(capacity=1, max_staleness=0)
    await buffer.put(group(0, [0]))
    blocked = asyncio.create_task(buffer.put(group(1, [0])))
    await asyncio.sleep(0.01)
    assert not blocked.done() and buffer.indices() == [0]  # back-pressure on the rollouts
    take = asyncio.create_task(buffer.take(2, version=0))
    taken, _ = await asyncio.wait_for(take, 1)  # takes 0, which frees room for 1
    await blocked
    assert [g.index for g in taken] == [0, 1]


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity"):
        GroupBuffer(capacity=0)
