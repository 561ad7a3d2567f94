"""The credit estimators' fast loops (numba) and their numpy formulas, against plain-Python
references written another way (explicit sums, dictionaries, recursion), on fixed-seed random
ragged inputs and edge cases."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import statistics
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import pytest
from arborl_require import unavailable
from hypothesis import given, settings
from hypothesis import strategies as st

from arborl.agents.credit import _parallel
from arborl.agents.credit import tree as tree_loops
from arborl.agents.credit import turns as turn_loops
from arborl.agents.credit.gigpo import gigpo_step_advantages, gigpo_step_advantages_formula
from arborl.agents.credit.layout import broadcast_to_tokens
from arborl.agents.credit.tree import tree_credit, tree_credit_formula
from arborl.agents.credit.turns import discounted_returns, discounted_returns_formula, gae, gae_formula
from arborl.kernels import KernelInputError, ShapeMismatchError

# ─── plain-Python references ────────────────────────────────────────────────────────────


def ref_returns(rewards, offsets, gamma):
    """G_t = Σ_{k >= t} γ^(k - t) r_k inside each trajectory."""
    out = []
    for a, b in itertools.pairwise(offsets):
        out += [sum(gamma ** (k - t) * rewards[k] for k in range(t, b)) for t in range(a, b)]
    return out


def ref_gae(rewards, values, offsets, gamma, lam, boot):
    """A_t = Σ_l (γλ)^l δ_{t+l}, with V after the last step = bootstrap."""
    adv = []
    for j, (a, b) in enumerate(itertools.pairwise(offsets)):
        v_next = [*values[a + 1 : b], boot[j]]
        deltas = [rewards[t] + gamma * v_next[t - a] - values[t] for t in range(a, b)]
        adv += [sum((gamma * lam) ** (k - t) * deltas[k - a] for k in range(t, b)) for t in range(a, b)]
    return adv


def ref_gigpo(scores, groups, states, eps, normalize_std):
    """GiGPO's step groups (Feng et al. 2025, eq. 6-7): steps of one episode group taken from
    the same anchor state are normalised among themselves; a step alone in its group has no
    peer and gets 0."""
    members = defaultdict(list)
    for i, key in enumerate(zip(groups, states, strict=True)):
        members[key].append(i)
    adv = [0.0] * len(scores)
    anchor_of = {}
    for key, idx in members.items():
        vals = [scores[i] for i in idx]
        mean, std = (statistics.fmean(vals), statistics.stdev(vals)) if len(vals) > 1 else (vals[0], 1.0)
        for i in idx:
            adv[i] = (scores[i] - mean) / (std + eps) if normalize_std else scores[i] - mean
        anchor_of[key] = idx
    return adv, anchor_of


def ref_tree(parents, rewards):
    children = defaultdict(list)
    for i, p in enumerate(parents):
        if p >= 0:
            children[p].append(i)

    def leaves(i):
        return [i] if not children[i] else [leaf for c in children[i] for leaf in leaves(c)]

    values = [statistics.fmean(rewards[j] for j in leaves(i)) for i in range(len(parents))]
    adv = [values[i] - values[p] if p >= 0 else 0.0 for i, p in enumerate(parents)]
    return values, adv


# ─── inputs ──────────────────────────────────────────────────────────────────────────────


def ragged_offsets(rng, n_traj, max_len, allow_empty=True):
    lengths = rng.integers(0 if allow_empty else 1, max_len + 1, size=n_traj)
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def random_forest(rng, n):
    """Topologically ordered parents with a few roots."""
    parents = np.empty(n, dtype=np.int64)
    for i in range(n):
        parents[i] = -1 if i == 0 or rng.random() < 0.05 else rng.integers(max(0, i - 6), i)
    return parents


EDGE_OFFSETS = [
    [0],  # no trajectories at all
    [0, 0, 0],  # only empty trajectories
    [0, 1],  # a single turn
    [0, 3, 3, 4],  # an empty one in the middle
    [0, 5],  # one trajectory
]


# ─── (1) returns and GAE ────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("offsets", EDGE_OFFSETS)
@pytest.mark.parametrize("gamma", [0.0, 0.9, 1.0])
def test_returns_edge_cases(offsets, gamma):
    rewards = np.arange(offsets[-1], dtype=float) - 1.5
    np.testing.assert_allclose(
        discounted_returns(rewards, offsets, gamma), ref_returns(rewards, offsets, gamma)
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_returns_and_gae_random_ragged(seed):
    rng = np.random.default_rng(seed)
    off = ragged_offsets(rng, 40, 12)
    s = off[-1]
    rewards, values = rng.normal(size=s), rng.normal(size=s)
    boot = rng.normal(size=len(off) - 1)
    np.testing.assert_allclose(
        discounted_returns(rewards, off, 0.95), ref_returns(rewards, off, 0.95), rtol=1e-12
    )
    adv, ret = gae(rewards, values, off, 0.97, 0.9, boot)
    np.testing.assert_allclose(adv, ref_gae(rewards, values, off, 0.97, 0.9, boot), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ret, adv + values)
    adv0, _ = gae(rewards, values, off, 0.97, 0.9)  # terminal: bootstrap 0
    np.testing.assert_allclose(
        adv0, ref_gae(rewards, values, off, 0.97, 0.9, [0.0] * (len(off) - 1)), atol=1e-12
    )


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    lengths=st.lists(st.integers(0, 6), max_size=8),
    gamma=st.floats(0, 1),
    lam=st.floats(0, 1),
    data=st.data(),
)
def test_gae_property(lengths, gamma, lam, data):
    off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    floats = st.floats(-10, 10, allow_nan=False)
    n = int(off[-1])
    rewards = data.draw(st.lists(floats, min_size=n, max_size=n))
    values = data.draw(st.lists(floats, min_size=n, max_size=n))
    boot = data.draw(st.lists(floats, min_size=len(lengths), max_size=len(lengths)))
    adv, _ = gae(rewards, values, off, gamma, lam, boot)
    np.testing.assert_allclose(adv, ref_gae(rewards, values, off, gamma, lam, boot), rtol=1e-9, atol=1e-9)
    # λ = 1 with zero values is the discounted return plus the discounted bootstrap
    if lam == 1.0 and not any(boot):
        adv1, _ = gae(rewards, np.zeros(n), off, gamma, 1.0)
        np.testing.assert_allclose(adv1, discounted_returns(rewards, off, gamma), rtol=1e-9, atol=1e-9)


def test_broadcast_to_tokens():
    np.testing.assert_array_equal(broadcast_to_tokens([1.0, 2.0, 3.0], [0, 2, 2, 5]), [1, 1, 3, 3, 3])
    assert broadcast_to_tokens([], [0]).shape == (0,)
    with pytest.raises(KernelInputError):
        broadcast_to_tokens([1.0], [0, 2, 3])


def test_offsets_errors():
    with pytest.raises(KernelInputError, match="end at"):
        discounted_returns([1.0, 2.0], [0, 1], 0.9)
    with pytest.raises(KernelInputError, match="non-decreasing"):
        discounted_returns([1.0, 2.0], [0, 2, 1, 2], 0.9)
    with pytest.raises(KernelInputError, match="gamma"):
        discounted_returns([1.0], [0, 1], 1.5)
    with pytest.raises(ShapeMismatchError, match="values"):
        gae([1.0, 2.0], [1.0], [0, 2], 0.9, 0.9)
    with pytest.raises(ShapeMismatchError, match="bootstrap"):
        gae([1.0, 2.0], [1.0, 2.0], [0, 2], 0.9, 0.9, bootstrap_values=[0.0, 1.0])
    with pytest.raises(TypeError, match="integer"):
        discounted_returns([1.0], np.array([0.0, 1.0]), 0.9)


# ─── (2) GiGPO ──────────────────────────────────────────────────────────────────────────


def check_gigpo(scores, groups, states, eps=1e-6, normalize_std=True):
    adv, anchor = gigpo_step_advantages(scores, groups, states, eps, normalize_std)
    ref_adv, ref_groups = ref_gigpo(list(scores), list(groups), list(states), eps, normalize_std)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-10, atol=1e-12)
    # anchor ids partition the steps exactly as the (group, state) keys do
    assert len(set(anchor.tolist())) == len(ref_groups)
    for idx in ref_groups.values():
        assert len(set(anchor[idx].tolist())) == 1


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("normalize_std", [True, False])
@pytest.mark.parametrize("group_kind", ["dense", "hashed"])
def test_gigpo_random(seed, normalize_std, group_kind):
    rng = np.random.default_rng(seed)
    n = 500
    groups = rng.integers(0, 20, size=n)
    if group_kind == "hashed":  # arbitrary int64 ids (negative, huge) take the hash-table path
        groups = rng.integers(-(2**62), 2**62, size=20)[groups]
    states = rng.integers(-(2**62), 2**62, size=8)[rng.integers(0, 8, size=n)]  # 64-bit hashes
    check_gigpo(rng.normal(size=n), groups, states, normalize_std=normalize_std)


@pytest.mark.parametrize("normalize_std", [True, False])
def test_gigpo_large_random_case_through_the_parallel_kernel(parallel_on, normalize_std):
    """50k steps in 1250 episode groups (~40 steps each over 60 states): lone steps and
    crowded anchors side by side, through the multi-threaded kernel."""
    rng = np.random.default_rng(7)
    n = 50_000
    groups = np.sort(rng.integers(0, 1_250, size=n))
    states = rng.integers(0, 60, size=n) * 1_000_003
    check_gigpo(rng.normal(size=n), groups, states, normalize_std=normalize_std)
    assert _parallel._launch_pid == os.getpid()  # the parallel kernel did run


def test_gigpo_edge_cases():
    check_gigpo([], [], [])
    check_gigpo([3.0], [0], [1])  # a lone step has no peer: 0
    adv, _ = gigpo_step_advantages([3.0, -2.0, 5.0], [0, 0, 1], [1, 2, 1])  # all lone steps
    np.testing.assert_array_equal(adv, [0.0, 0.0, 0.0])
    check_gigpo([1.0, 2.0, 4.0], [0, 1, 2], [5, 5, 5])  # same state, different groups: not pooled
    adv, _ = gigpo_step_advantages([2.0, 2.0, 2.0], [0, 0, 0], [9, 9, 9])  # no spread: all 0
    np.testing.assert_array_equal(adv, [0.0, 0.0, 0.0])
    with pytest.raises(ShapeMismatchError):
        gigpo_step_advantages([1.0, 2.0], [0, 0], [1])


# ─── (3) trees ──────────────────────────────────────────────────────────────────────────


def check_tree(parents, rewards):
    values, adv = tree_credit(parents, rewards)
    ref_values, ref_adv = ref_tree(list(parents), list(rewards))
    np.testing.assert_allclose(values, ref_values, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tree_random_forest(seed):
    rng = np.random.default_rng(seed)
    parents = random_forest(rng, 300)
    check_tree(parents, rng.normal(size=300))


def test_tree_edge_cases():
    check_tree([], [])
    check_tree([-1], [2.5])  # a single node is its own leaf; advantage 0
    check_tree([-1, 0, 1, 2], [9.0, 9.0, 9.0, 1.0])  # a chain: every value is the one leaf's
    check_tree([-1, 0, 0, 0], [0.0, 1.0, 2.0, 6.0])  # a star: internal reward ignored
    check_tree([-1, -1, 0, 1, 1], [0.0, 0.0, 4.0, 1.0, 3.0])  # two trees
    values, adv = tree_credit([-1, 0, 0], [7.0, 1.0, 3.0])
    assert values.tolist() == [2.0, 1.0, 3.0] and adv.tolist() == [0.0, -1.0, 1.0]


def test_tree_errors():
    with pytest.raises(KernelInputError, match="topological"):
        tree_credit([-1, 2, 0], [0.0, 1.0, 2.0])
    with pytest.raises(KernelInputError, match="topological"):
        tree_credit([0], [1.0])
    with pytest.raises(ShapeMismatchError):
        tree_credit([-1, 0], [1.0])


# ─── (4) the multi-threaded path ────────────────────────────────────────────────────────


@pytest.fixture
def parallel_on(monkeypatch):
    """Send every input through the parallel kernels, whatever its size or the machine's load."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        unavailable("numba threads", "numba has one thread here: no parallel path to test")
    monkeypatch.setattr(_parallel, "PARALLEL_MIN_ITEMS", 1)
    monkeypatch.setattr(_parallel, "LOAD_AWARE", False)
    monkeypatch.setattr(_parallel, "_launch_pid", None)


def contiguous_forest(rng, n_trees, size):
    """Trees one after another (each a contiguous run of nodes), as tree rollouts store them."""
    parents = []
    for k in range(n_trees):
        parents += [-1] + [k * size + int(rng.integers(max(0, i - 6), i)) for i in range(1, size)]
    return np.asarray(parents, dtype=np.int64)


def credit_outputs(rng, n_traj=60):
    """Every credit kernel on one ragged data set (empty trajectories, shuffled hashed groups)."""
    off = ragged_offsets(rng, n_traj, 9)
    s = int(off[-1])
    rewards, values, boot = rng.normal(size=s), rng.normal(size=s), rng.normal(size=n_traj)
    groups = rng.integers(-(2**62), 2**62, size=12)[rng.integers(0, 12, size=s)]  # unsorted, hashed
    states = rng.integers(0, 6, size=s)
    parents = contiguous_forest(rng, 8, 40)
    return {
        "returns": discounted_returns(rewards, off, 0.93),
        "gae": gae(rewards, values, off, 0.97, 0.9, boot),
        "gigpo": gigpo_step_advantages(rewards, groups, states),
        "gigpo_sorted": gigpo_step_advantages(rewards, np.sort(rng.integers(0, 9, size=s)), states),
        "tree": tree_credit(parents, rng.normal(size=parents.shape[0])),
        "inputs": (rewards, values, off, boot, groups, states, parents),
    }


def assert_same_outputs(a, b):
    for key in ("returns", "gae", "gigpo", "gigpo_sorted", "tree"):
        for x, y in zip(np.atleast_2d(a[key]), np.atleast_2d(b[key]), strict=True):
            np.testing.assert_array_equal(x, y, err_msg=key)  # bit for bit, not approximately


@pytest.mark.parametrize("seed", [0, 1])
def test_one_thread_and_two_threads_agree_bit_for_bit(parallel_on, seed):
    previous = numba.get_num_threads()
    try:
        numba.set_num_threads(1)  # one thread: the serial kernels
        one = credit_outputs(np.random.default_rng(seed))
        assert _parallel._launch_pid is None
        numba.set_num_threads(2)
        two = credit_outputs(np.random.default_rng(seed))
        assert _parallel._launch_pid == os.getpid()  # the parallel kernels did run
    finally:
        numba.set_num_threads(previous)
    assert_same_outputs(one, two)
    rewards, values, off, boot, groups, states, parents = two["inputs"]
    np.testing.assert_allclose(two["returns"], ref_returns(rewards, off, 0.93), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(two["gae"][0], ref_gae(rewards, values, off, 0.97, 0.9, boot), atol=1e-12)
    check_gigpo(rewards, groups, states)
    check_tree(parents, np.arange(parents.shape[0], dtype=float))


@pytest.mark.parametrize("n_chunks", [1, 2, 3, 7, 50])
def test_chunking_does_not_change_results(n_chunks):
    """The parallel kernels split the work at trajectory / group / tree boundaries only."""
    rng = np.random.default_rng(5)
    off = ragged_offsets(rng, 30, 7)
    r, v, boot = rng.normal(size=off[-1]), rng.normal(size=off[-1]), rng.normal(size=30)
    out, ret = np.empty_like(r), np.empty_like(r)
    turn_loops.returns_parallel(r, off, 0.9, out, n_chunks)
    np.testing.assert_array_equal(out, discounted_returns(r, off, 0.9))
    turn_loops.gae_parallel(r, v, off, boot, 0.9, 0.8, out, ret, n_chunks)
    np.testing.assert_array_equal(out, gae(r, v, off, 0.9, 0.8, boot)[0])
    parents, leaf = contiguous_forest(rng, 10, 20), rng.normal(size=200)
    values, adv = np.empty(200), np.empty(200)
    status = tree_loops.tree_parallel(parents, leaf, values, adv, n_chunks)
    assert (status == tree_loops.TREE_OK).all()
    expected = tree_credit(parents, leaf)
    np.testing.assert_array_equal(values, expected[0])
    np.testing.assert_array_equal(adv, expected[1])


def test_parallel_tree_edge_cases(parallel_on):
    # interleaved trees (topological, but no tree is a contiguous run): the serial fallback
    check_tree([-1, -1, 0, 1, 0, 1, 2, 3], [0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    check_tree([-1] * 5, [1.0, 2.0, 3.0, 4.0, 5.0])  # only roots
    bad = [-1, 0, 1, -1, 3, 4, -1, 9, 6, 6]  # the first order violation is reported, not a later one
    with pytest.raises(KernelInputError, match="node 7 has parent 9"):
        tree_credit([*bad, -1, 12, 10], np.zeros(13))


def test_forked_child_after_a_parallel_launch(parallel_on):
    """GNU OpenMP kills a forked child on its first parallel region (SIGTERM); ours runs serially."""
    rng = np.random.default_rng(0)
    off = ragged_offsets(rng, 50, 9)
    rewards = rng.normal(size=off[-1])
    expected = discounted_returns(rewards, off, 0.9)  # a parallel launch in this process
    assert _parallel._launch_pid == os.getpid()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(discounted_returns, (rewards, off, 0.9)).get(timeout=60)
    np.testing.assert_array_equal(got, expected)


def test_concurrent_callers(parallel_on):
    """Threads calling at once (numba's workqueue layer would abort on concurrent launches)."""
    rng = np.random.default_rng(1)
    off = ragged_offsets(rng, 200, 9)
    rewards = rng.normal(size=off[-1])
    expected = np.asarray(ref_returns(rewards, off, 0.9))
    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(lambda _: discounted_returns(rewards, off, 0.9), range(40)))
    for got in results:
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-13)


# ─── (5) the formulas each module opens with ────────────────────────────────────────────


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_returns_and_gae_formulas_are_the_references(seed):
    rng = np.random.default_rng(seed)
    off = ragged_offsets(rng, 40, 12)
    rewards, values, boot = rng.normal(size=off[-1]), rng.normal(size=off[-1]), rng.normal(size=40)
    formula = discounted_returns_formula(rewards, off, 0.95)
    np.testing.assert_allclose(formula, ref_returns(rewards, off, 0.95), rtol=1e-12)
    np.testing.assert_allclose(discounted_returns(rewards, off, 0.95), formula, rtol=1e-12)
    adv, ret = gae_formula(rewards, values, off, 0.97, 0.9, boot)
    np.testing.assert_allclose(adv, ref_gae(rewards, values, off, 0.97, 0.9, boot), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ret, adv + values)
    np.testing.assert_allclose(gae(rewards, values, off, 0.97, 0.9, boot)[0], adv, rtol=1e-10, atol=1e-12)
    terminal, _ = gae_formula(rewards, values, off, 0.97, 0.9)
    np.testing.assert_allclose(terminal, ref_gae(rewards, values, off, 0.97, 0.9, [0.0] * 40), atol=1e-12)


@pytest.mark.parametrize("offsets", EDGE_OFFSETS)
@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_the_returns_formula_on_edge_cases(offsets, gamma):
    rewards = np.arange(offsets[-1], dtype=float) - 1.5
    np.testing.assert_allclose(
        discounted_returns_formula(rewards, offsets, gamma), ref_returns(rewards, offsets, gamma)
    )


@pytest.mark.parametrize("normalize_std", [True, False])
def test_the_gigpo_step_formula_is_the_reference(normalize_std):
    rng = np.random.default_rng(4)
    n = 400
    groups = rng.integers(-(2**62), 2**62, size=15)[rng.integers(0, 15, size=n)]
    states = rng.integers(-(2**62), 2**62, size=6)[rng.integers(0, 6, size=n)]
    scores = rng.normal(size=n)
    formula = gigpo_step_advantages_formula(scores, groups, states, 1e-6, normalize_std)
    ref, _ = ref_gigpo(list(scores), list(groups), list(states), 1e-6, normalize_std)
    np.testing.assert_allclose(formula, ref, rtol=1e-10, atol=1e-12)
    fast, _ = gigpo_step_advantages(scores, groups, states, 1e-6, normalize_std)
    np.testing.assert_allclose(fast, formula, rtol=1e-10, atol=1e-12)
    assert gigpo_step_advantages_formula([], [], []).shape == (0,)
    np.testing.assert_array_equal(gigpo_step_advantages_formula([3.0, 5.0], [0, 1], [7, 7]), [0.0, 0.0])


def test_the_tree_formula_is_the_reference():
    rng = np.random.default_rng(6)
    parents, rewards = random_forest(rng, 120), rng.normal(size=120)
    values, adv = tree_credit_formula(parents, rewards)
    ref_values, ref_adv = ref_tree(list(parents), list(rewards))
    np.testing.assert_allclose(values, ref_values, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-12, atol=1e-12)
    fast = tree_credit(parents, rewards)
    np.testing.assert_allclose(fast[0], values, rtol=1e-12, atol=1e-12)
    for case in ([], [-1], [-1, 0, 0, 0], [-1, -1, 0, 1, 1]):
        got, want = (
            tree_credit_formula(case, np.arange(len(case), dtype=float)),
            ref_tree(case, list(range(len(case)))),
        )
        np.testing.assert_allclose(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1])
