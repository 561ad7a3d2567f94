"""Trajectories pack into verl's DataProto layout, and verl's own algorithms run on it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

from arborl.agents.trajectory import Trajectory, Turn
from arborl.trainer.dataproto import BatchOverflowError, trajectories_to_dataproto

PAD = 0


def traj(prompt, turns, group="g", outcome=0.0) -> Trajectory:
    return Trajectory(prompt_ids=prompt, turns=turns, group_id=group, outcome_reward=outcome)


def sample() -> list[Trajectory]:
    return [
        traj(
            [5, 6, 7],
            [
                Turn([10, 11], [-0.1, -0.2], observation_ids=[30, 31], policy_versions=[3, 3], reward=0.5),
                Turn([12], [-0.3], policy_versions=[4]),
            ],
            outcome=1.0,
        ),
        traj([8], [Turn([13, 14, 15], [-0.4, -0.5, -0.6])], outcome=0.0),
    ]


def test_layout_matches_verls_agent_loop():
    data = trajectories_to_dataproto(sample(), PAD)
    b = data.batch
    assert b["prompts"].tolist() == [[5, 6, 7], [PAD, PAD, 8]]
    assert b["responses"].tolist() == [[10, 11, 30, 31, 12], [13, 14, 15, PAD, PAD]]
    assert b["response_mask"].tolist() == [[1, 1, 0, 0, 1], [1, 1, 1, 0, 0]]
    assert b["attention_mask"].tolist() == [[1] * 8, [0, 0, 1, 1, 1, 1, 0, 0]]
    assert b["position_ids"].tolist() == [list(range(8)), [0, 0, 0, 1, 2, 3, 3, 3]]
    assert torch.allclose(b["rollout_log_probs"][0], torch.tensor([-0.1, -0.2, 0, 0, -0.3]))
    assert b["policy_versions"].tolist() == [[3, 3, -1, -1, 4], [-1, -1, -1, -1, -1]]
    # Turn rewards on each turn's last sampled token; the rest of the outcome on the last one.
    assert b["token_level_scores"].tolist() == [[0, 0.5, 0, 0, 0.5], [0, 0, 0, 0, 0]]
    assert b["token_level_scores"].sum(-1).tolist() == [1.0, 0.0]  # each row sums to its outcome
    assert list(data.non_tensor_batch["uid"]) == ["g", "g"]


def test_unpadding_gives_back_every_token_exactly():
    trajs = sample()
    data = trajectories_to_dataproto(trajs, PAD, max_prompt_length=6, max_response_length=9)
    for row, t in zip(range(len(trajs)), trajs, strict=True):
        att = data.batch["attention_mask"][row].bool()
        assert data.batch["input_ids"][row][att].tolist() == t.token_ids().tolist()
        resp_att = att[6:]
        assert (
            data.batch["response_mask"][row][resp_att].tolist() == t.loss_mask()[len(t.prompt_ids) :].tolist()
        )


def test_overflow_is_an_error_not_a_silent_cut():
    with pytest.raises(BatchOverflowError, match="truncate at rollout"):
        trajectories_to_dataproto(sample(), PAD, max_response_length=3)


def test_verls_grpo_runs_on_the_batch():
    rng = np.random.default_rng(0)
    trajs = [
        traj([1, 2], [Turn([3, 4, 5], list(rng.normal(-1, 0.1, 3)))], group=g, outcome=r)
        for g, r in [("a", 1.0), ("a", 0.0), ("b", 1.0), ("b", 1.0)]
    ]
    data = trajectories_to_dataproto(trajs, PAD)
    adv, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=data.batch["token_level_scores"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
    )
    assert adv[0, 0] > 0 > adv[1, 0]  # group "a": the success is above the failure
    assert torch.allclose(adv[2], torch.zeros(3)) and torch.allclose(adv[3], torch.zeros(3))  # all equal
