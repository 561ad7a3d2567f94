"""Step-level credit estimators: hand-computed cases, and verl's own estimators where they overlap
(GiGPO has its own file, test_gigpo.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

from arborl.agents import Trajectory, TrajectoryTree, Turn
from arborl.agents.credit import CreditError, compute_advantages, turn_spans
from arborl.trainer.dataproto import trajectories_to_dataproto


def turn(n: int, reward: float = 0.0, obs: int = 2) -> Turn:
    return Turn([7] * n, [-1.0] * n, observation_ids=[9] * obs, reward=reward)


def episode(group: str, turns: list[Turn], outcome: float | None = None) -> Trajectory:
    turns[-1].observation_ids = []
    total = sum(t.reward for t in turns) if outcome is None else outcome
    return Trajectory([1, 2], turns, group_id=group, outcome_reward=total)


def per_turn(adv: torch.Tensor, data, row: int) -> list[float]:
    """The advantage of each turn of a row (checking it is constant over the turn's tokens)."""
    out = []
    for a, b in turn_spans(data.batch["response_mask"])[row]:
        vals = adv[row, a:b]
        assert torch.allclose(vals, vals[0].expand_as(vals))
        out.append(round(vals[0].item(), 6))
    return out


def test_turn_spans_are_the_runs_of_sampled_tokens():
    mask = torch.tensor([[1, 1, 0, 0, 1, 0], [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    assert turn_spans(mask) == [[(0, 2), (4, 5)], [], [(0, 6)]]


def test_turn_returns_by_hand():
    # Group g: rewards per turn [0, 0, 1] and [0.5]; gamma 0.5.
    data = trajectories_to_dataproto(
        [episode("g", [turn(2), turn(1), turn(3, 1.0)]), episode("g", [turn(2, 0.5)])], pad_token_id=0
    )
    adv, ret = compute_advantages(data, "turn_returns", gamma=0.5)
    # G = [0.25, 0.5, 1.0] and [0.5]; baseline = mean(G_0) = (0.25 + 0.5) / 2 = 0.375
    assert per_turn(ret, data, 0) == [0.25, 0.5, 1.0] and per_turn(ret, data, 1) == [0.5]
    assert per_turn(adv, data, 0) == [-0.125, 0.125, 0.625] and per_turn(adv, data, 1) == [0.125]
    assert (adv[data.batch["response_mask"] == 0] == 0).all()  # env tokens get nothing


def test_tree_advantages_by_hand():
    #            root (mean of leaves = 2/3)
    #           /        \
    #        a (1/2)     d (1) = leaf
    #        /    \
    #     b (1)   c (0)      leaves
    tree = TrajectoryTree(prompt_ids=[1, 2], group_id="t")
    a = tree.add(turn(2))
    b, c = tree.add(turn(1), a), tree.add(turn(3), a)
    d = tree.add(turn(2), -1)
    for node, reward in ((b, 1.0), (c, 0.0), (d, 1.0)):
        tree.nodes[node].outcome_reward, tree.nodes[node].terminal = reward, True
        tree.nodes[node].turn.observation_ids = []
    leaves = tree.leaves()
    assert [leaf.tree_path for leaf in leaves] == [[a, b], [a, c], [d]]
    data = trajectories_to_dataproto(leaves, pad_token_id=0)
    adv, values = compute_advantages(data, "tree", global_weight=1.0, local_weight=1.0)
    root = 2 / 3
    assert per_turn(values, data, 0) == pytest.approx([0.5, 1.0], abs=1e-6)
    # A(n) = (V(n) - V(root)) + (V(n) - V(parent))
    assert per_turn(adv, data, 0) == pytest.approx([2 * (0.5 - root), (1 - root) + 0.5], abs=1e-5)
    assert per_turn(adv, data, 1) == pytest.approx([2 * (0.5 - root), (0 - root) - 0.5], abs=1e-5)
    assert per_turn(adv, data, 2) == pytest.approx([2 * (1 - root)], abs=1e-5)
    # TreeRL's reweighting: turn a is in both of its leaves' rows (k = 2), the others in one.
    for style, k_a in (("sqrt", 2**0.5), ("uniform", 2.0)):
        re_adv, re_values = compute_advantages(data, "tree", reweight=style)
        assert per_turn(re_adv, data, 0) == pytest.approx(
            [2 * (0.5 - root) / k_a, (1 - root) + 0.5], abs=1e-5
        )
        assert per_turn(re_adv, data, 1) == pytest.approx(
            [2 * (0.5 - root) / k_a, (0 - root) - 0.5], abs=1e-5
        )
        assert per_turn(re_adv, data, 2) == pytest.approx([2 * (1 - root)], abs=1e-5)
        assert torch.equal(re_values, values)  # values are not reweighted
    with pytest.raises(CreditError, match="reweight must be one of"):
        compute_advantages(data, "tree", reweight="root")


def test_uniform_reweight_trains_each_shared_turn_once():
    """With ``uniform``, the copies of a node's turn (one per leaf below it) sum to the
    advantage a tree trained node by node would give it once, ``A(n)`` from the formula."""
    rng = np.random.default_rng(3)
    tree = TrajectoryTree(prompt_ids=[1, 2], group_id="t")
    nodes = [tree.add(turn(2))]
    for _ in range(12):  # a random tree: each new turn under a random earlier one or a new root
        nodes.append(tree.add(turn(2), int(rng.choice([-1, *nodes]))))
    parents = {n.parent for n in tree.nodes}
    for i, node in enumerate(tree.nodes):
        if i not in parents:
            node.outcome_reward, node.terminal, node.turn.observation_ids = float(rng.random()), True, []
    leaves = tree.leaves()
    data = trajectories_to_dataproto(leaves, pad_token_id=0)
    adv, _ = compute_advantages(data, "tree", reweight="uniform")
    original, _ = compute_advantages(data, "tree")
    summed: dict[int, float] = {}
    once: dict[int, float] = {}
    for row, leaf in enumerate(leaves):
        for node, a, o in zip(
            leaf.tree_path, per_turn(adv, data, row), per_turn(original, data, row), strict=True
        ):
            summed[node] = summed.get(node, 0.0) + a
            once[node] = o
    assert summed == pytest.approx(once, abs=1e-5)
    assert any(sum(node in leaf.tree_path for leaf in leaves) > 1 for node in once)  # something was shared


def test_a_flat_tree_is_dr_grpo():
    """Independent samples (no shared prefix) with only the global term: outcome minus the
    group mean, which is verl's GRPO without the std (Dr. GRPO)."""
    rng = np.random.default_rng(0)
    trajs = [episode(g, [turn(2), turn(1, float(rng.random() < 0.5))]) for g in "aaaabbbb"]
    data = trajectories_to_dataproto(trajs, pad_token_id=0)
    adv, _ = compute_advantages(data, "tree", global_weight=1.0, local_weight=0.0)
    ref, _ = core_algos.compute_grpo_outcome_advantage(
        data.batch["token_level_scores"],
        data.batch["response_mask"],
        data.non_tensor_batch["uid"],
        norm_adv_by_std_in_grpo=False,
    )
    last = [turn_spans(data.batch["response_mask"])[i][-1][0] for i in range(len(trajs))]
    assert torch.allclose(adv[range(len(trajs)), last], ref[range(len(trajs)), last], atol=1e-6)


def test_missing_inputs_are_clear_errors():
    data = trajectories_to_dataproto([episode("g", [turn(1, 1.0)])], pad_token_id=0)
    fn = core_algos.get_adv_estimator_fn("gigpo")
    with pytest.raises(CreditError, match="anchor_state_hashes"):
        fn(data.batch["token_level_scores"], data.batch["response_mask"], index=data.non_tensor_batch["uid"])
    with pytest.raises(CreditError, match="tree_paths"):
        core_algos.get_adv_estimator_fn("tree")(data.batch["token_level_scores"], data.batch["response_mask"])
    with pytest.raises(ValueError, match="Unknown advantage estimator"):
        compute_advantages(data, "no-such-estimator")
