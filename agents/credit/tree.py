"""Tree / fork-relative credit (TreeRL, Hou et al. 2025; PORTool): the ``tree`` estimator.

Rows are the leaves of a group's tree of rollouts (one row per leaf path); ``tree_paths`` gives
the node of each turn. A node's value is the mean outcome of the leaves below it, and each turn
``n`` of a leaf's path gets::

    V(n) = mean_{leaves l below n} R(l)
    A(n) = w_g · (V(n) - V(root)) + w_l · (V(n) - V(parent(n)))

(global: better than the task on average; local: better than its siblings' fork point). The
leaf outcomes ``R(l)`` are first normalised within the group (the tree's leaves) as GRPO
normalises a group, ``(R - mean) / (std + ε)``, so advantages do not carry the reward's scale
(Sokoban's -3…+10 gave steps 0.02-2.6 apart). Subtracting the mean changes no difference of
values: TreeRL's own code (``leaf_normalize``) subtracts each leaf's leave-one-out mean, which
is ``N/(N-1) · (R - mean)``, the same up to that factor; the division by the std is what
makes the scale the group's. Trees are flat: ``parents[i]`` is node i's parent, -1 for a root, every parent before its children
(topological order); a forest is several trees concatenated, parent indices shifted by each
tree's start.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from numba import njit, prange
from verl.trainer.ppo.core_algos import register_adv_est

from arborl.kernels.errors import KernelInputError, ShapeMismatchError

from ._parallel import parallel_slot
from .grpo import group_normalise
from .layout import CreditError, FloatArray, as_float, as_int, option, row_groups, to_tokens, turn_spans

# ─── the formula ─────────────────────────────────────────────────────────────────────────


def tree_credit_formula(parents: npt.ArrayLike, leaf_rewards: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """``V(n)`` = the mean of ``leaf_rewards`` over the leaves below ``n`` (a leaf is below
    itself), ``A(n) = V(n) - V(parent(n))`` (0 at a root), as written: a node × leaf
    membership table (quadratic). What `tree_credit` computes in two sweeps."""
    par = np.asarray(parents, dtype=np.int64)
    r = np.asarray(leaf_rewards, dtype=np.float64)
    n = par.shape[0]
    is_leaf = np.ones(n, dtype=bool)
    is_leaf[par[par >= 0]] = False
    below = np.zeros((n, n), dtype=bool)  # below[a, l]: leaf l lies under node a
    for leaf in np.flatnonzero(is_leaf):
        a = leaf
        while a >= 0:
            below[a, leaf] = True
            a = par[a]
    values = np.where(below, r, 0.0).sum(axis=1) / below.sum(axis=1)
    return values, np.where(par >= 0, values - values[np.maximum(par, 0)], 0.0)


# ─── the fast loop ───────────────────────────────────────────────────────────────────────

# One ``_tree_range`` over a run of whole trees, and two drivers: ``tree_serial`` over
# everything, ``tree_parallel`` cutting the forest at roots into one run per thread. The same
# code computes a tree either way, so results are bit-identical whatever the thread count.

TREE_OK = -1
TREE_OPEN = -2  # a node's parent lies before its chunk: the chunk is not a set of whole trees


@njit(cache=True, nogil=True)
def _tree_range(parents, rewards, values, adv, a, b):  # pragma: no cover - compiled
    """Values and advantages of nodes ``[a, b)``, which must hold whole trees.

    Returns ``TREE_OK``, the first node whose parent breaks topological order, or
    ``TREE_OPEN`` when a parent lies before ``a`` (nothing outside ``[a, b)`` is written).
    """
    total = values  # leaf-reward sums first, divided into means below
    count = adv  # leaf counts (as floats) until the last loop overwrites them
    for i in range(a, b):  # validate and clear in one pass
        p = parents[i]
        if p < -1 or p >= i:
            return i
        if 0 <= p < a:
            return TREE_OPEN
        total[i] = 0.0
        count[i] = 0.0
    for i in range(b - 1, a - 1, -1):  # children come after parents: sweep back up the tree
        if count[i] == 0.0:  # nothing below: a leaf
            total[i] = rewards[i]
            count[i] = 1.0
        p = parents[i]
        if p >= 0:
            total[p] += total[i]
            count[p] += count[i]
    for i in range(a, b):  # parents come first, so values[p] is final when node i reads it
        values[i] = total[i] / count[i]
        p = parents[i]
        adv[i] = values[i] - values[p] if p >= 0 else 0.0
    return TREE_OK


@njit(cache=True, nogil=True)
def tree_serial(parents, rewards, values, adv):  # pragma: no cover - compiled
    return _tree_range(parents, rewards, values, adv, 0, parents.shape[0])


@njit(cache=True, nogil=True)
def _tree_chunk_start(parents, c, n_chunks):  # pragma: no cover - compiled
    """Chunk ``c`` starts at the first root at or after its equal share (or at the end)."""
    n = parents.shape[0]
    if c == 0:
        return 0
    i = n * c // n_chunks
    while i < n and parents[i] != -1:
        i += 1
    return i


@njit(cache=True, nogil=True, parallel=True)
def tree_parallel(parents, rewards, values, adv, n_chunks):  # pragma: no cover - compiled
    """Per-chunk status (see ``_tree_range``); any ``TREE_OPEN`` means: run ``tree_serial``."""
    status = np.empty(n_chunks, dtype=np.int64)
    for c in prange(n_chunks):
        a, b = _tree_chunk_start(parents, c, n_chunks), _tree_chunk_start(parents, c + 1, n_chunks)
        status[c] = _tree_range(parents, rewards, values, adv, a, b)
    return status


def tree_credit(parents: npt.ArrayLike, leaf_rewards: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Node values (mean reward of the leaves below each node) and fork-relative advantages
    (``value[child] - value[parent]``; 0 at roots).

    Shapes: ``parents [n]`` (int, -1 for roots, ``parents[i] < i``), ``leaf_rewards [n]`` (read
    at leaves only; internal entries are ignored) -> ``(values [n], advantages [n])`` float64.
    """
    par = as_int("parents", parents)
    rew = as_float("leaf_rewards", leaf_rewards)
    if par.shape != rew.shape:
        raise ShapeMismatchError(f"parents {par.shape} and leaf_rewards {rew.shape} must match")
    values = np.empty_like(rew)
    adv = np.empty_like(rew)
    # The loops check the order themselves, in the pass that clears their scratch.
    bad = TREE_OPEN
    with parallel_slot(par.shape[0]) as n_chunks:
        if n_chunks:
            status = tree_parallel(par, rew, values, adv, n_chunks)
            # the first bad node of the chunk that holds the first bad node overall
            bad = (
                TREE_OPEN
                if (status == TREE_OPEN).any()
                else min((int(x) for x in status if x >= 0), default=TREE_OK)
            )
    if bad == TREE_OPEN:  # small input, or trees that are not contiguous runs of nodes
        bad = tree_serial(par, rew, values, adv)
    if bad >= 0:
        raise KernelInputError(
            f"parents must be in topological order (-1 or an index below the node's own); "
            f"node {bad} has parent {par[bad]}"
        )
    return values, adv


_REWEIGHT_POWER = {"original": 0.0, "sqrt": 0.5, "uniform": 1.0}
#: How leaf outcomes are normalised within a group before the tree's values are taken.
TREE_NORMS = ("std", "none")

# ─── the registration ────────────────────────────────────────────────────────────────────


@register_adv_est("tree")
def compute_tree_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    tree_paths: Any = None,
    global_weight: float | None = None,
    local_weight: float | None = None,
    reweight: str | None = None,
    normalize: str | None = None,
    epsilon: float = 1e-6,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tree / fork-relative advantages (TreeRL, Hou et al. 2025; PORTool): node value ``V(n)``
    is the mean outcome of the leaves below ``n``; each turn ``n`` of a leaf's path gets

        ``A(n) = w_g · (V(n) - V(root)) + w_l · (V(n) - V(parent(n)))``

    (global: better than the task on average; local: better than its siblings' fork point).
    ``V(root)`` is the group's mean leaf outcome, the parent of a first turn is the root.
    Weights: ``global_weight`` / ``local_weight`` (else ``config.tree_global_weight`` /
    ``tree_local_weight``, else 1 / 1). Rows are the tree's leaves: one row per leaf path.

    ``normalize`` (else ``config.tree_norm``): ``"std"`` (the default) first turns each
    group's leaf outcomes into ``(R - mean) / (std + ε)`` (unbiased std, GRPO's; a lone leaf
    keeps its outcome), so the advantages are on the group's scale, not the reward's;
    ``"none"`` takes the raw outcomes (a mean alone would change nothing: only differences of
    values enter ``A``).

    A turn shared by ``k`` leaves is in ``k`` rows, so it is trained ``k`` times. ``reweight``
    (else ``config.tree_reweight``) divides its advantage in each row: ``"sqrt"`` (the
    default: TreeRL's choice, ``R(s_n) / sqrt(|L(s_n)|)`` in its paper and
    ``--weighted_value_style sqrt`` in its published script) by ``sqrt(k)``, ``"original"`` by
    1, ``"uniform"`` by ``k`` (its copies then weigh ``A(n)`` in all, as one trained turn).
    TreeRL divides a node's summed leaf value before its differences are taken; here the
    turn's advantage is divided. Returns ``(A, V)`` per token (``V`` is not reweighted; it is
    on the normalised scale).
    """
    if tree_paths is None:
        raise CreditError("tree needs tree_paths (each row's node id per turn, within its group's tree)")
    wg = float(option(global_weight, config, "tree_global_weight", 1.0))
    wl = float(option(local_weight, config, "tree_local_weight", 1.0))
    style = str(option(reweight, config, "tree_reweight", "sqrt"))
    if style not in _REWEIGHT_POWER:
        raise CreditError(f"tree reweight must be one of {sorted(_REWEIGHT_POWER)}, not {style!r}")
    norm = str(option(normalize, config, "tree_norm", "std"))
    if norm not in TREE_NORMS:
        raise CreditError(f"tree normalize must be one of {TREE_NORMS}, not {norm!r}")
    power = _REWEIGHT_POWER[style]
    spans = turn_spans(response_mask)
    outcomes = token_level_rewards.detach().to(torch.float64).sum(-1).cpu().numpy()
    groups = row_groups(index, len(spans))
    if norm == "std":
        outcomes = group_normalise(outcomes, groups, "zero", True, epsilon)
    paths = [list(p) for p in tree_paths]
    if [len(p) for p in paths] != [len(s) for s in spans]:
        raise CreditError("tree_paths must give one node id per turn of each row")
    adv_rows: list[np.ndarray] = [np.zeros(0)] * len(paths)
    val_rows: list[np.ndarray] = [np.zeros(0)] * len(paths)
    for grp in np.unique(groups):
        rows = np.flatnonzero(groups == grp)
        order, parents, leaf_reward = _group_forest(rows, paths, outcomes)
        values, local = tree_credit(np.asarray(parents), np.asarray(leaf_reward))
        row_ids = {r: [order[n] for n in paths[r]] for r in rows}
        # leaves below each node = rows through it (each row's nodes are distinct: a path)
        through = np.bincount([i for ids in row_ids.values() for i in ids], minlength=len(parents))
        for r, ids in row_ids.items():
            adv_rows[r] = (wg * (values[ids] - values[0]) + wl * local[ids]) / through[ids] ** power
            val_rows[r] = values[ids]
    return to_tokens(adv_rows, spans, token_level_rewards), to_tokens(val_rows, spans, token_level_rewards)


def _group_forest(
    rows: np.ndarray, paths: list[list[Any]], outcomes: np.ndarray
) -> tuple[dict[Any, int], list[int], list[float]]:
    """A group's tree in the flat layout: a virtual root (node 0) over the first turns, nodes
    numbered in order of first appearance, each row's outcome on its last node."""
    order: dict[Any, int] = {}
    parents: list[int] = [-1]
    leaf_reward: list[float] = [0.0]
    for r in rows:
        parent = 0
        for node in paths[r]:
            if node not in order:
                order[node] = len(parents)
                parents.append(parent)
                leaf_reward.append(0.0)
            parent = order[node]
        if paths[r]:
            leaf_reward[parent] = outcomes[r]
    return order, parents, leaf_reward
