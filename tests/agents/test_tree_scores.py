"""Where a tree forks: TRACE's p(1 - p) on outcomes in [0, 1], never on raw returns, and
the tie rule when a tree's leaves all agree. Each expected choice is derived here from the
formula in a plain loop over the leaves, not read from `TreeRollout`."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from arborl.agents import Turn
from arborl.agents.trajectory import TrajectoryTree
from arborl.agents.tree_rollout import TreeConfig, TreeRollout, _Growing


def grow(paths: list[tuple[list[str], float]]) -> tuple[_Growing, dict[str, int]]:
    """A tree from root-to-leaf paths of named turns (shared names: shared nodes) and each
    leaf's reward. Every node but the leaves keeps an env state (a turn fork point), so does
    the start. Returns the tree and its nodes by name."""
    tree = TrajectoryTree(prompt_ids=[1])
    ids: dict[str, int] = {}
    for names, reward in paths:
        parent = -1
        for name in names:
            if name not in ids:
                ids[name] = tree.add(Turn([5], [-0.1]), parent)
            parent = ids[name]
        tree.nodes[parent].outcome_reward, tree.nodes[parent].terminal = reward, True
    leaves = {names[-1] for names, _ in paths}
    snaps = {-1: SimpleNamespace(done=False)} | {
        ids[n]: SimpleNamespace(done=False) for n in ids if n not in leaves
    }
    return _Growing({"id": "t"}, tree, snaps), ids


def trace_scores(paths: list[tuple[list[str], float]], explore: float) -> dict[str, float]:
    """TRACE's score of every fork point (the start "", and each inner node) by hand:
    p = the share of successful leaves (reward > 0) below it, score = p(1 - p) + explore / (1 + n)."""
    leaves = {names[-1] for names, _ in paths}
    points = {""} | {name for names, _ in paths for name in names if name not in leaves}
    scores = {}
    for point in points:
        below = [reward for names, reward in paths if point == "" or point in names]
        p = sum(1.0 if r > 0 else 0.0 for r in below) / len(below)
        scores[point] = p * (1 - p) + explore / (1 + len(below))
    return scores


def picked(trees: TreeRollout, grows: list[_Growing], want: int) -> list[tuple[int, int]]:
    """(which tree, which node) of each point a round picks."""
    return [(grows.index(g), q.node) for g, q in trees._pick(grows, want)]


def test_forks_go_to_the_mixed_subtree_not_the_failing_one():
    """Sokoban-like returns (-3 .. +10): after a shared first turn `r`, subtree `a` fails
    twice (-3, -1) and subtree `b` is mixed (+10, -3). On raw returns p(1 - p) is largest at
    p = 0.75 (the start and `r`); the failing subtree outscores the mixed one (-6 > -8.75).
    On success, `b` (p = 1/2) is the one prefix of most uncertain outcome."""
    paths = [
        (["r", "a", "a1"], -3.0),
        (["r", "a", "a2"], -1.0),
        (["r", "b", "b1"], 10.0),
        (["r", "b", "b2"], -3.0),
    ]
    expected = trace_scores(paths, explore=0.0)
    best = max(expected, key=lambda k: expected[k])
    assert best == "b" and expected["b"] == 0.25 and expected["a"] == 0.0

    g, ids = grow(paths)
    trees = TreeRollout(None, None, TreeConfig(branches=1, branch_at="turn", explore=0.0))  # type: ignore[arg-type]
    assert picked(trees, [g], want=1) == [(0, ids[best])]
    by_node = {q.node: q.score for q in trees._points(g.tree, g.snaps)}
    assert by_node == {(-1 if k == "" else ids[k]): v for k, v in expected.items()}


def test_a_budget_over_prompts_ranks_the_trees_on_success_not_returns():
    """TRACE over two prompts (one budget): prompt 0's roots both fail (-3, -3), prompt 1's
    disagree (+10, -1). Raw returns scored prompt 0's start -12, prompt 1's -15.75 and its
    failing root's first turn -2 (p = -1), which came first; on success prompt 1's start
    (p = 1/2) does."""
    explore = 0.25
    fail = [(["f1", "f1-end"], -3.0), (["f2", "f2-end"], -3.0)]
    mixed = [(["m1", "m1-end"], 10.0), (["m2", "m2-end"], -1.0)]
    expected = [trace_scores(fail, explore), trace_scores(mixed, explore)]
    best = max(((i, k) for i, s in enumerate(expected) for k in s), key=lambda c: expected[c[0]][c[1]])
    assert best == (1, "")  # 1/4 + 0.25/3 against 0.25/2 for a one-leaf prefix

    (gf, _), (gm, _) = grow(fail), grow(mixed)
    trees = TreeRollout(None, None, TreeConfig(branches=2, branch_at="turn", explore=explore))  # type: ignore[arg-type]
    assert picked(trees, [gf, gm], want=2) == [(1, -1)]
    assert picked(trees, [gm, gf], want=2) == [(0, -1)]  # whichever order the trees come in


def test_when_every_leaf_agrees_ties_go_to_the_shallowest_point_not_the_deepest_failed_turn():
    """Both roots fail: p(1 - p) = 0 everywhere, and only the bonus speaks: every one-leaf
    prefix scores explore / 2, above the start (explore / 3). Among those, the first turns
    (depth 1) go before the last turns of the failed paths. Where the leaves below do
    disagree, ties still go deeper: `c` and `d` hold the same two leaves, and `d` is where
    they part."""
    paths = [(["a1", "a2", "a3", "a-end"], -3.0), (["b1", "b2", "b3", "b-end"], -1.0)]
    expected = trace_scores(paths, explore=0.25)
    top = max(expected.values())
    assert {k for k, v in expected.items() if v == top} == {"a1", "a2", "a3", "b1", "b2", "b3"}

    g, ids = grow(paths)
    trees = TreeRollout(None, None, TreeConfig(branches=1, branch_at="turn"))  # type: ignore[arg-type]
    assert sorted(node for _, node in picked(trees, [g], want=2)) == sorted([ids["a1"], ids["b1"]])

    split = [(["c", "d", "win"], 1.0), (["c", "d", "lose"], 0.0)]
    h, ids = grow(split)
    assert picked(trees, [h], want=1) == [(0, ids["d"])]  # start, c and d tie at 1/4 + 0.25/3


@pytest.mark.parametrize("fork_outcome", ["success", "minmax"])
def test_fork_outcomes_are_scored_on_zero_to_one(fork_outcome):
    """`minmax`: the rewards scaled by the range of the leaves, then their variance (p(1 - p)
    for 0/1 outcomes; 0 where the leaves agree, whatever their value)."""
    paths = [
        (["r", "a", "a1"], -3.0),
        (["r", "a", "a2"], -3.0),
        (["r", "b", "b1"], 10.0),
        (["r", "b", "b2"], -1.0),
    ]
    g, ids = grow(paths)
    trees = TreeRollout(None, None, TreeConfig(branch_at="turn", explore=0.0, fork_outcome=fork_outcome))  # type: ignore[arg-type]
    scores = {q.node: q.score for q in trees._points(g.tree, g.snaps)}
    lo, hi = -3.0, 10.0
    for name, node in [("", -1), ("r", ids["r"]), ("a", ids["a"]), ("b", ids["b"])]:
        below = [r for names, r in paths if name == "" or name in names]
        if fork_outcome == "success":
            xs = [1.0 if r > 0 else 0.0 for r in below]
        else:
            xs = [(r - lo) / (hi - lo) for r in below]
        mean = sum(xs) / len(xs)
        variance = sum((x - mean) ** 2 for x in xs) / len(xs)
        assert scores[node] == pytest.approx(variance)
        assert 0.0 <= scores[node] <= 0.25
    assert scores[ids["a"]] == 0.0  # two equal failures: nothing mixed below
