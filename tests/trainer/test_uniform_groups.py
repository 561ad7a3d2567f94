"""Which groups a step trains on: a group whose episodes all scored the same carries no signal
for outcome-level credit (GRPO's advantages there are all 0) but can for step-level credit
(GiGPO: a turn that looped returns less under verl-agent's γ = 0.95 than one that moved on)."""

from __future__ import annotations

import pytest
from verl.trainer.ppo import core_algos

from arborl.agents import Trajectory, Turn
from arborl.agents.credit import compute_advantages
from arborl.agents.credit.registry import uniform_groups_carry_signal
from arborl.trainer.dataproto import trajectories_to_dataproto
from arborl.trainer.local.buffer import Group
from arborl.trainer.local.reinforce import groups_with_signal


def episode(group: str, states: list[str], outcome: float) -> Trajectory:
    turns = [Turn([7, 7], [-1.0, -1.0], observation_ids=[9], anchor_state_hash=s) for s in states]
    turns[-1].observation_ids = []
    turns[-1].reward = outcome
    return Trajectory([1, 2], turns, group_id=group, outcome_reward=outcome)


# Both episodes succeed; the first tried a locked door in s0 before moving on.
UNIFORM = Group(0, [episode("u", ["s0", "s0", "s1"], 1.0), episode("u", ["s0", "s1"], 1.0)])
MIXED = Group(1, [episode("m", ["s0", "s1"], 1.0), episode("m", ["s0", "s1"], 0.0)])


def test_the_rule_is_the_estimators():
    assert uniform_groups_carry_signal("gigpo") and uniform_groups_carry_signal("turn_returns")
    for outcome_level in ("grpo", "rloo", "tree", "no-such-estimator"):
        assert not uniform_groups_carry_signal(outcome_level)


@pytest.mark.parametrize(("estimator", "kept"), [("grpo", [1]), ("tree", [1]), ("gigpo", [0, 1])])
def test_uniform_groups_are_dropped_only_where_they_carry_no_signal(estimator, kept):
    drop = not uniform_groups_carry_signal(estimator)
    groups, uniform = groups_with_signal([UNIFORM, MIXED], drop_uniform=drop)
    assert [g.index for g in groups] == kept and uniform == 1
    # what "no signal" means, checked against the estimators themselves on the uniform group
    data = trajectories_to_dataproto(UNIFORM.trajectories, pad_token_id=0)
    grpo, _ = core_algos.compute_grpo_outcome_advantage(
        data.batch["token_level_scores"], data.batch["response_mask"], data.non_tensor_batch["uid"]
    )
    assert grpo.abs().max() == 0
    gigpo, _ = compute_advantages(data, "gigpo")
    assert gigpo.abs().max() > 0  # the loop in s0 is told from the exit


def test_nothing_is_dropped_when_the_switch_is_off():
    groups, uniform = groups_with_signal([UNIFORM, MIXED], drop_uniform=False)
    assert [g.index for g in groups] == [0, 1] and uniform == 1
