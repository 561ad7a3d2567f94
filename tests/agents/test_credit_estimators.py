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
    adv, values = compute_advantages(
        data, "tree", global_weight=1.0, local_weight=1.0, normalize="none", reweight="original"
    )
    root = 2 / 3
    assert per_turn(values, data, 0) == pytest.approx([0.5, 1.0], abs=1e-6)
    # A(n) = (V(n) - V(root)) + (V(n) - V(parent))
    assert per_turn(adv, data, 0) == pytest.approx([2 * (0.5 - root), (1 - root) + 0.5], abs=1e-5)
    assert per_turn(adv, data, 1) == pytest.approx([2 * (0.5 - root), (0 - root) - 0.5], abs=1e-5)
    assert per_turn(adv, data, 2) == pytest.approx([2 * (1 - root)], abs=1e-5)
    # TreeRL's reweighting: turn a is in both of its leaves' rows (k = 2), the others in one.
    for style, k_a in (("sqrt", 2**0.5), ("uniform", 2.0)):
        re_adv, re_values = compute_advantages(data, "tree", reweight=style, normalize="none")
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
    original, _ = compute_advantages(data, "tree", reweight="original")
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
    last = [turn_spans(data.batch["response_mask"])[i][-1][0] for i in range(len(trajs))]
    for norm, by_std in (("none", False), ("std", True)):  # Dr. GRPO; with the std, verl's GRPO
        adv, _ = compute_advantages(data, "tree", global_weight=1.0, local_weight=0.0, normalize=norm)
        ref, _ = core_algos.compute_grpo_outcome_advantage(
            data.batch["token_level_scores"],
            data.batch["response_mask"],
            data.non_tensor_batch["uid"],
            norm_adv_by_std_in_grpo=by_std,
        )
        assert torch.allclose(adv[range(len(trajs)), last], ref[range(len(trajs)), last], atol=1e-5)


def treerl_reference(paths: list[list[str]], outcomes: list[float], eps: float = 1e-6) -> list[list[float]]:
    """TreeRL's step reward by plain loops, as its paper writes it, on leaf outcomes normalised
    as GRPO normalises a group (one tree = one group)::

        R̂(l)   = (R(l) - mean R) / (std R + ε)                       std unbiased
        V(n)   = mean of R̂(l) over the leaves l whose path passes n    (the root: every leaf)
        A(n)   = [(V(n) - V(root)) + (V(n) - V(parent n))] / sqrt(|L(n)|)

    ``paths``: each leaf's node names from the first turn down."""
    mean = sum(outcomes) / len(outcomes)
    std = (sum((r - mean) ** 2 for r in outcomes) / (len(outcomes) - 1)) ** 0.5
    norm = [(r - mean) / (std + eps) for r in outcomes]

    def leaves_below(node: str | None) -> list[int]:
        return [i for i, p in enumerate(paths) if node is None or node in p]

    def value(node: str | None) -> float:
        below = leaves_below(node)
        return sum(norm[i] for i in below) / len(below)

    out = []
    for path in paths:
        row = []
        for t, node in enumerate(path):
            parent = path[t - 1] if t else None
            a = (value(node) - value(None)) + (value(node) - value(parent))
            row.append(a / len(leaves_below(node)) ** 0.5)
        out.append(row)
    return out


def test_tree_defaults_are_treerls_normalised_and_sqrt_reweighted():
    """Sokoban-scale raw rewards (-3 … +10): the defaults give the paper's step reward on the
    group-normalised outcomes, so the scale is the group's (multiplying every reward by 10
    changes nothing), and a shared turn is divided by sqrt of the leaves below it."""
    #   a ─ b (-3)        d (10)
    #     ├ c (-1)
    #     └ e ─ f (2)
    #           └ g (-3)
    tree = TrajectoryTree(prompt_ids=[1, 2], group_id="t")
    a = tree.add(turn(2))
    b, c, e = tree.add(turn(1), a), tree.add(turn(3), a), tree.add(turn(2), a)
    f, g = tree.add(turn(1), e), tree.add(turn(2), e)
    d = tree.add(turn(2), -1)
    names = {a: "a", b: "b", c: "c", d: "d", e: "e", f: "f", g: "g"}
    for node, reward in ((b, -3.0), (c, -1.0), (f, 2.0), (g, -3.0), (d, 10.0)):
        tree.nodes[node].outcome_reward, tree.nodes[node].terminal = reward, True
        tree.nodes[node].turn.observation_ids = []
    leaves = tree.leaves()
    data = trajectories_to_dataproto(leaves, pad_token_id=0)
    adv, _ = compute_advantages(data, "tree")
    want = treerl_reference(
        [[names[n] for n in leaf.tree_path] for leaf in leaves], [leaf.outcome_reward for leaf in leaves]
    )
    for row, w in enumerate(want):
        assert per_turn(adv, data, row) == pytest.approx(w, abs=1e-5)
    for leaf in leaves:
        leaf.outcome_reward *= 10
        leaf.turns[-1].reward = leaf.outcome_reward
    scaled, _ = compute_advantages(trajectories_to_dataproto(leaves, pad_token_id=0), "tree")
    assert torch.allclose(scaled, adv, atol=1e-5)
    with pytest.raises(CreditError, match="normalize must be one of"):
        compute_advantages(data, "tree", normalize="minmax")


def test_missing_inputs_are_clear_errors():
    data = trajectories_to_dataproto([episode("g", [turn(1, 1.0)])], pad_token_id=0)
    fn = core_algos.get_adv_estimator_fn("gigpo")
    with pytest.raises(CreditError, match="anchor_state_hashes"):
        fn(data.batch["token_level_scores"], data.batch["response_mask"], index=data.non_tensor_batch["uid"])
    with pytest.raises(CreditError, match="tree_paths"):
        core_algos.get_adv_estimator_fn("tree")(data.batch["token_level_scores"], data.batch["response_mask"])
    with pytest.raises(ValueError, match="Unknown advantage estimator"):
        compute_advantages(data, "no-such-estimator")
