"""Trajectory layout, masks, trees and the Parquet round trip."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from arborl.agents.trajectory import (
    SCHEMA_VERSION,
    Trajectory,
    TrajectoryTree,
    Turn,
    read_trajectories,
    write_trajectories,
)


def make() -> Trajectory:
    return Trajectory(
        prompt_ids=[1, 2, 3],
        turns=[
            Turn(
                [10, 11],
                [-0.5, -0.25],
                observation_ids=[20, 21, 22],
                policy_versions=[4, 4],
                reward=0.1,
                env_state_hash="abc",
                tool_call_ok=True,
                anchor_state_hash="s0",
                anchor_observation="Turn 1. You are in the hall.",
            ),
            Turn([12], [-1.0], policy_versions=[5], finish_reason="length"),
        ],
        task_id="t1",
        group_id="g",
        outcome_reward=1.0,
        terminated=True,
        metrics={"turns": 2.0},
    )


def test_layout_masks_logprobs_versions():
    t = make()
    assert t.token_ids().tolist() == [1, 2, 3, 10, 11, 20, 21, 22, 12]
    assert t.loss_mask().tolist() == [0, 0, 0, 1, 1, 0, 0, 0, 1]
    assert t.behavior_logprobs().tolist() == [0, 0, 0, -0.5, -0.25, 0, 0, 0, -1.0]
    assert t.policy_versions().tolist() == [-1, -1, -1, 4, 4, -1, -1, -1, 5]
    assert t.turn_spans() == [(3, 5), (8, 9)]
    assert len(t) == 9 and t.num_response_tokens == 3
    ids = t.token_ids()
    for (a, b), turn in zip(t.turn_spans(), t.turns, strict=True):
        assert ids[a:b].tolist() == turn.response_ids


def test_turn_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match="log-probs"):
        Turn([1, 2], [-0.1])
    with pytest.raises(ValueError, match="policy_versions"):
        Turn([1, 2], [-0.1, -0.2], policy_versions=[1])


def test_parquet_round_trip_is_exact(tmp_path):
    trajs = [make(), Trajectory(prompt_ids=[7], truncation="max_turns")]
    path = write_trajectories(tmp_path / "run" / "part-0.parquet", trajs)
    assert not list(path.parent.glob(".*tmp"))
    back = read_trajectories(path)
    assert back == trajs
    assert np.array_equal(back[0].token_ids(), trajs[0].token_ids())
    meta = pq.read_schema(path).metadata
    assert meta[b"arborl.trajectory_schema"] == str(SCHEMA_VERSION).encode()


def test_reader_refuses_other_schema_versions(tmp_path):
    import pyarrow as pa

    pq.write_table(
        pa.table({"x": [1]}).replace_schema_metadata({b"arborl.trajectory_schema": b"99"}),
        tmp_path / "f.parquet",
    )
    with pytest.raises(ValueError, match="v99"):
        read_trajectories(tmp_path / "f.parquet")


def test_tree_shares_prefixes_and_flattens_to_leaves():
    tree = TrajectoryTree(prompt_ids=[1, 2], task_id="t")
    root = tree.add(Turn([10, 11, 12], [-0.1] * 3, observation_ids=[30]))
    a = tree.add(Turn([13], [-0.2]), parent=root)
    b = tree.add(Turn([14, 15], [-0.3, -0.3], observation_ids=[31]), parent=root)
    b1 = tree.add(Turn([16], [-0.4]), parent=b)
    tree.nodes[a].outcome_reward, tree.nodes[b1].outcome_reward = 0.0, 1.0
    assert tree.leaf_ids() == [a, b1] and tree.children(root) == [a, b]
    leaves = tree.leaves()
    assert [t.token_ids().tolist() for t in leaves] == [
        [1, 2, 10, 11, 12, 30, 13],
        [1, 2, 10, 11, 12, 30, 14, 15, 31, 16],
    ]
    assert {t.group_id for t in leaves} == {tree.group_id}
    assert [t.outcome_reward for t in leaves] == [0.0, 1.0]
    # Sampled once for the tree (3 + 1 + 2 + 1) vs once per leaf path (4 + 6).
    assert tree.generated_tokens() == 7 and sum(t.num_response_tokens for t in leaves) == 10
    with pytest.raises(IndexError):
        tree.add(Turn([1], [0.0]), parent=99)
