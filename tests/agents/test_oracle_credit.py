"""``oracle_step``: GiGPO's episode term plus each turn's oracle label, against a plain loop
written from the definition, and clear errors when the labels are missing or do not fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from arborl.agents.credit import (
    CreditError,
    compute_advantages,
    compute_oracle_step_advantage,
    turn_spans,
    uniform_groups_carry_signal,
)
from arborl.agents.trajectory import Trajectory, Turn
from arborl.trainer.dataproto import trajectories_to_dataproto

EPS = 1e-6

# (episode group, [(reward, label), ...]): labels +1 right, -1 wrong, None unlabelled (0)
CASE = [
    ("g", [(0.0, 1.0), (0.0, -1.0), (0.0, 1.0), (1.0, None)]),
    ("g", [(0.0, -1.0), (0.0, -1.0), (0.0, -1.0)]),
    ("g", [(0.0, 1.0), (0.5, None)]),
    ("h", [(0.0, 1.0), (1.0, None)]),
    ("h", [(0.0, 1.0), (1.0, None)]),  # equal totals: A_E 0, the labels alone
    ("k", [(0.3, -1.0), (0.4, 1.0)]),  # a lone episode
]


def reference(rows, w, mode, eps=EPS):
    """By the definition, in plain loops: A(i, t) = A_E(i) + w · label(i, t), where
    A_E(i) = (R_i - mean R) / F over the episodes of i's group, R_i = Σ_t r_{i,t}; a lone
    episode has mean 0 and F 1; F = std + ε (unbiased) for mean_std_norm, 1 for mean_norm."""
    totals = [sum(r for r, _ in turns) for _, turns in rows]
    out = []
    for i, (group, turns) in enumerate(rows):
        peers = [totals[j] for j, (g, _) in enumerate(rows) if g == group]
        if len(peers) == 1:
            mean, std = 0.0, 1.0
        else:
            mean = sum(peers) / len(peers)
            std = math.sqrt(sum((p - mean) ** 2 for p in peers) / (len(peers) - 1))
        a_e = totals[i] - mean if mode == "mean_norm" else (totals[i] - mean) / (std + eps)
        out.append([a_e + w * (0.0 if label is None else label) for _, label in turns])
    return out


def trajectory(group, turns):
    built = [
        Turn([7] * (2 + k % 2), [-1.0] * (2 + k % 2), observation_ids=[9, 9], reward=r, step_label=label)
        for k, (r, label) in enumerate(turns)
    ]
    built[-1].observation_ids = []
    return Trajectory([1, 2], built, group_id=group, outcome_reward=sum(r for r, _ in turns))


def per_turn(adv, data, row):
    out = []
    for a, b in turn_spans(data.batch["response_mask"])[row]:
        vals = adv[row, a:b]
        assert torch.allclose(vals, vals[0].expand_as(vals))  # one value per turn
        out.append(vals[0].item())
    return out


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("w", [1.0, 0.5])
def test_oracle_step_equals_its_definition_on_a_hand_built_case(mode, w):
    data = trajectories_to_dataproto([trajectory(g, t) for g, t in CASE], pad_token_id=0)
    adv, ret = compute_advantages(data, "oracle_step", step_weight=w, mode=mode)
    for row, want in enumerate(reference(CASE, w, mode)):
        assert per_turn(adv, data, row) == pytest.approx(want, abs=1e-5)
    assert (adv[data.batch["response_mask"] == 0] == 0).all()  # env tokens get nothing
    assert torch.equal(adv, ret)


def test_a_few_numbers_checked_by_eye_and_the_default_weight_is_one():
    data = trajectories_to_dataproto([trajectory(g, t) for g, t in CASE], pad_token_id=0)
    adv, _ = compute_advantages(data, "oracle_step")
    # group g: totals 1, 0, 0.5 -> mean 0.5; row 0 is +0.5 and its turns add +1, -1, +1, 0
    assert per_turn(adv, data, 0) == pytest.approx([1.5, -0.5, 1.5, 0.5], abs=1e-6)
    assert per_turn(adv, data, 4) == pytest.approx([1.0, 0.0], abs=1e-6)  # equal totals
    assert uniform_groups_carry_signal("oracle_step")  # so the trainer keeps such groups
    assert per_turn(adv, data, 5) == pytest.approx([-0.3, 1.7], abs=1e-6)  # lone: A_E = R = 0.7
    # the episode term is GiGPO's: with every label 0 the two estimators' episode terms agree
    flat = [(g, [(r, None) for r, _ in t]) for g, t in CASE]
    plain = trajectories_to_dataproto([trajectory(g, t) for g, t in flat], pad_token_id=0)
    ours, _ = compute_advantages(plain, "oracle_step")
    gigpo, _ = compute_advantages(plain, "gigpo", step_weight=0.0)
    assert torch.allclose(ours, gigpo, atol=1e-6)


def test_missing_or_ill_fitting_labels_raise_a_clear_credit_error():
    data = trajectories_to_dataproto([trajectory(g, t) for g, t in CASE], pad_token_id=0)
    data.non_tensor_batch.pop("step_labels")
    with pytest.raises(CreditError, match=r"oracle_step needs step_labels .*Turn\.step_label"):
        compute_advantages(data, "oracle_step")
    data = trajectories_to_dataproto([trajectory(g, t) for g, t in CASE], pad_token_id=0)
    rewards, mask, index = (
        data.batch["token_level_scores"],
        data.batch["response_mask"],
        data.non_tensor_batch["uid"],
    )
    with pytest.raises(CreditError, match="oracle_step needs step_labels"):
        compute_oracle_step_advantage(rewards, mask, index=index, anchor_state_hashes=[()])
    short = np.empty(len(CASE), dtype=object)
    for i, (_, turns) in enumerate(CASE):
        short[i] = (0.0,) * (len(turns) - (i == 1))
    with pytest.raises(CreditError, match=r"turns per row; the mask has \[4, 3, 2, 2, 2, 2\]"):
        compute_oracle_step_advantage(rewards, mask, index=index, step_labels=short)
    with pytest.raises(CreditError, match="numbers"):
        compute_oracle_step_advantage(
            rewards, mask, index=index, step_labels=[("right",) * len(t) for _, t in CASE]
        )
    with pytest.raises(CreditError, match="mode"):
        compute_advantages(data, "oracle_step", mode="max_norm")
