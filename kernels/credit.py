"""numba kernels for CPU-side credit assignment over ragged, flattened trajectories.

Trajectories are stored flat, one entry per step (a turn, or a token), with ``traj_offsets``
marking where each one starts::

    rewards       [r0 r1 r2 | r3 | | r4 r5]      S = 6 steps, flat
    traj_offsets  [0, 3, 4, 4, 6]                T = 4 trajectories (the third is empty)

Per-turn values are spread over tokens with ``broadcast_to_tokens(values, turn_offsets)``.
Trees (tree rollouts) are flat too: ``parents[i]`` is the index of node i's parent, -1 for a
root, and every parent comes before its children (topological order). A forest is several
trees concatenated with their parent indices shifted by each tree's start.

The loops are written by hand because their data-dependent recurrences (a backward scan per
trajectory, a hash grouping of step keys, a reverse topological sweep) have no vectorised numpy or
torch form; numba compiles them once (``cache=True`` keeps the machine code across runs).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

from .errors import DTypeMismatchError, KernelInputError, ShapeMismatchError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


# ─── validation ──────────────────────────────────────────────────────────────────────────


def _as_float(name: str, x: npt.ArrayLike) -> FloatArray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ShapeMismatchError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size and not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise DTypeMismatchError(f"{name} must be numeric, got {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.float64)


def _as_int(name: str, x: npt.ArrayLike) -> IntArray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ShapeMismatchError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise DTypeMismatchError(f"{name} must be an integer array, got {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _check_offsets(name: str, offsets: npt.ArrayLike, n: int) -> IntArray:
    off = _as_int(name, offsets)
    if off.size == 0 or off[0] != 0 or off[-1] != n:
        raise KernelInputError(
            f"{name} must start at 0 and end at the number of steps ({n}), got {off[:3]}..."
        )
    if np.any(np.diff(off) < 0):
        raise KernelInputError(f"{name} must be non-decreasing")
    return off


def _check_gamma(name: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise KernelInputError(f"{name} must lie in [0, 1], got {value}")
    return float(value)


# ─── (1) discounted returns and GAE over turns ──────────────────────────────────────────


# fastmath "contract" only lets LLVM fuse a*b + c into one FMA (one rounding instead of two):
# the backward recurrences are latency-bound, and this halves their critical path.
@njit(cache=True, fastmath={"contract"})
def _discounted_returns_kernel(rewards, offsets, gamma, out):  # pragma: no cover - compiled
    for k in range(offsets.shape[0] - 1):
        acc = 0.0
        for i in range(offsets[k + 1] - 1, offsets[k] - 1, -1):
            acc = rewards[i] + gamma * acc
            out[i] = acc


def discounted_returns(rewards: npt.ArrayLike, traj_offsets: npt.ArrayLike, gamma: float) -> FloatArray:
    """``G_t = r_t + γ G_{t+1}`` inside each trajectory (``G`` after the last step is 0).

    Shapes: ``rewards [S]``, ``traj_offsets [T + 1]`` -> ``returns [S]`` (float64).
    """
    r = _as_float("rewards", rewards)
    off = _check_offsets("traj_offsets", traj_offsets, r.shape[0])
    out = np.empty_like(r)
    _discounted_returns_kernel(r, off, _check_gamma("gamma", gamma), out)
    return out


@njit(cache=True, fastmath={"contract"})
def _gae_kernel(rewards, values, offsets, bootstrap, gamma, lam, adv):  # pragma: no cover - compiled
    for k in range(offsets.shape[0] - 1):
        next_value = bootstrap[k]
        acc = 0.0
        for i in range(offsets[k + 1] - 1, offsets[k] - 1, -1):
            delta = rewards[i] + gamma * next_value - values[i]
            acc = delta + gamma * lam * acc
            adv[i] = acc
            next_value = values[i]


def gae(
    rewards: npt.ArrayLike,
    values: npt.ArrayLike,
    traj_offsets: npt.ArrayLike,
    gamma: float,
    lam: float,
    bootstrap_values: npt.ArrayLike | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Generalised advantage estimation over the steps (turns) of each trajectory.

    ``δ_t = r_t + γ V_{t+1} - V_t``, ``A_t = δ_t + γλ A_{t+1}``, returns ``A_t + V_t``.
    ``V`` after a trajectory's last step is ``bootstrap_values[k]`` (0 when None: terminal).

    Shapes: ``rewards, values [S]``, ``traj_offsets [T + 1]``, ``bootstrap_values [T]``
    -> ``(advantages [S], returns [S])`` (float64).
    """
    r = _as_float("rewards", rewards)
    v = _as_float("values", values)
    if v.shape != r.shape:
        raise ShapeMismatchError(f"values {v.shape} must match rewards {r.shape}")
    off = _check_offsets("traj_offsets", traj_offsets, r.shape[0])
    n_traj = off.shape[0] - 1
    boot = np.zeros(n_traj) if bootstrap_values is None else _as_float("bootstrap_values", bootstrap_values)
    if boot.shape != (n_traj,):
        raise ShapeMismatchError(f"bootstrap_values must be [T] = [{n_traj}], got {boot.shape}")
    adv = np.empty_like(r)
    _gae_kernel(r, v, off, boot, _check_gamma("gamma", gamma), _check_gamma("lam", lam), adv)
    return adv, adv + v


def broadcast_to_tokens(per_turn: npt.ArrayLike, turn_offsets: npt.ArrayLike) -> FloatArray:
    """Spread one value per turn over that turn's tokens: ``[n_turns]`` -> ``[n_tokens]``.

    ``turn_offsets [n_turns + 1]`` gives each turn's token range (np.repeat does the work).
    """
    vals = _as_float("per_turn", per_turn)
    off = _as_int("turn_offsets", turn_offsets)
    if off.shape[0] != vals.shape[0] + 1 or (off.size and off[0] != 0) or np.any(np.diff(off) < 0):
        raise KernelInputError("turn_offsets must be [n_turns + 1], start at 0 and be non-decreasing")
    return np.repeat(vals, np.diff(off))


# ─── (2) GiGPO anchor-state grouping ────────────────────────────────────────────────────


@njit(cache=True)
def _probe(keys, ids, key):  # pragma: no cover - compiled
    """Slot of ``key`` in an open-addressing table (``ids == -1``: free): its own or the first free."""
    mask = ids.shape[0] - 1
    h = key * 0x9E3779B97F4A7C1  # int64 multiply wraps: an odd multiplier mixes the bits
    j = (h ^ (h >> 29)) & mask
    while ids[j] != -1 and keys[j] != key:
        j = (j + 1) & mask  # linear probing
    return j


@njit(cache=True)
def _intern_from(values, out, keys, ids, start, n_ids):  # pragma: no cover - compiled
    """Dense ids for ``values[start:]`` until the table is half full; returns (next i, n_ids)."""
    for i in range(start, values.shape[0]):
        j = _probe(keys, ids, values[i])
        if ids[j] == -1:
            if 2 * n_ids >= ids.shape[0]:
                return i, n_ids
            keys[j], ids[j] = values[i], n_ids
            n_ids += 1
        out[i] = ids[j]
    return values.shape[0], n_ids


@njit(cache=True)
def _intern(values, out):  # pragma: no cover - compiled
    """``out[i]`` = dense id of ``values[i]`` (first appearance order); returns the count. The
    table doubles when half full, so it stays proportional to the distinct values."""
    keys, ids = np.empty(1024, dtype=np.int64), np.full(1024, -1, dtype=np.int64)
    i, n_ids = 0, 0
    while True:
        i, n_ids = _intern_from(values, out, keys, ids, i, n_ids)
        if i == values.shape[0]:
            return n_ids
        old_keys, old_ids = keys, ids
        keys, ids = np.empty(2 * ids.shape[0], dtype=np.int64), np.full(2 * ids.shape[0], -1, dtype=np.int64)
        for q in range(old_ids.shape[0]):
            if old_ids[q] != -1:
                j = _probe(keys, ids, old_keys[q])
                keys[j], ids[j] = old_keys[q], old_ids[q]


@njit(cache=True)
def _sort_by_group(gid, n_groups):  # pragma: no cover - compiled
    """Counting sort: ``order`` lists the steps group by group; group g is ``start[g]:start[g+1]``."""
    start = np.zeros(n_groups + 1, dtype=np.int64)
    for i in range(gid.shape[0]):
        start[gid[i] + 1] += 1
    for g in range(n_groups):
        start[g + 1] += start[g]
    order = np.empty(gid.shape[0], dtype=np.int64)
    fill = start[:-1].copy()
    for i in range(gid.shape[0]):
        order[fill[gid[i]]] = i
        fill[gid[i]] += 1
    return order, start


@njit(cache=True)
def _anchor_ids(states, order, start, anchor):  # pragma: no cover - compiled
    """Dense anchor ids of the distinct states inside each group, from a state table sized to
    the group: it stays in cache, where one table over all (group, state) pairs would not."""
    largest = 0
    for g in range(start.shape[0] - 1):
        largest = max(largest, start[g + 1] - start[g])
    size = 16
    while size < 2 * largest:
        size *= 2
    keys, ids = np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64)
    n_ids = 0
    for g in range(start.shape[0] - 1):
        width = 16
        while width < 2 * (start[g + 1] - start[g]):
            width *= 2
        ids[:width] = -1
        for k in range(start[g], start[g + 1]):
            i = order[k]
            j = _probe(keys[:width], ids[:width], states[i])
            if ids[j] == -1:
                keys[j], ids[j] = states[i], n_ids
                n_ids += 1
            anchor[i] = ids[j]
    return n_ids


@njit(cache=True)
def _normalise_in_groups(anchor, n_ids, scores, eps, use_std, adv):  # pragma: no cover - compiled
    count, mean, m2 = np.zeros(n_ids), np.zeros(n_ids), np.zeros(n_ids)
    for i in range(scores.shape[0]):  # Welford: one pass, no cancellation
        a = anchor[i]
        count[a] += 1.0
        delta = scores[i] - mean[a]
        mean[a] += delta / count[a]
        m2[a] += delta * (scores[i] - mean[a])
    for i in range(scores.shape[0]):
        a = anchor[i]
        # a lone step has no peers: mean 0, std 1 (verl's GRPO rule)
        mu, sd = (mean[a], np.sqrt(m2[a] / (count[a] - 1.0))) if count[a] > 1 else (0.0, 1.0)
        adv[i] = (scores[i] - mu) / (sd + eps) if use_std else scores[i] - mu


def gigpo_step_advantages(
    step_scores: npt.ArrayLike,
    group_ids: npt.ArrayLike,
    state_ids: npt.ArrayLike,
    eps: float = 1e-6,
    normalize_std: bool = True,
) -> tuple[FloatArray, IntArray]:
    """GiGPO step-level advantages: steps of one episode group that reached the same anchor
    state (equal ``(group_id, state_id)``) form a step group, normalised within it.

    ``A = (score - mean) / (std + eps)`` (``std`` unbiased), or ``score - mean`` with
    ``normalize_std=False``. A step group of one step uses mean 0, std 1, as verl's GRPO does.

    Shapes: ``step_scores [S]`` (e.g. discounted returns), ``group_ids [S]``, ``state_ids [S]``
    (int64 state hashes) -> ``(advantages [S] float64, anchor_ids [S] int64)``; anchor ids
    number the step groups 0..K-1 (by group, then state, each in order of first appearance).
    """
    scores = _as_float("step_scores", step_scores)
    groups = _as_int("group_ids", group_ids)
    states = _as_int("state_ids", state_ids)
    if not scores.shape == groups.shape == states.shape:
        raise ShapeMismatchError(
            f"step_scores {scores.shape}, group_ids {groups.shape} and state_ids {states.shape} must match"
        )
    # Kept as separate kernels: fused into one loop, LLVM could not keep the hash probe and the
    # per-anchor accumulators apart and the whole thing ran ~5x slower.
    n = scores.shape[0]
    if n and groups.min() >= 0 and groups.max() < n:  # already small non-negative ids: no hashing
        gid, n_groups = groups, int(groups.max()) + 1
    else:
        gid = np.empty(n, dtype=np.int64)
        n_groups = _intern(groups, gid)
    order, start = _sort_by_group(gid, n_groups)
    anchor = np.empty(n, dtype=np.int64)
    n_ids = _anchor_ids(states, order, start, anchor)
    adv = np.empty_like(scores)
    _normalise_in_groups(anchor, n_ids, scores, float(eps), bool(normalize_std), adv)
    return adv, anchor


# ─── (3) tree node values and fork-relative advantages ──────────────────────────────────


@njit(cache=True)
def _tree_kernel(parents, rewards, values, adv):  # pragma: no cover - compiled
    """Returns the first node whose parent breaks topological order, or -1 when all is well."""
    n = parents.shape[0]
    for i in range(n):
        if parents[i] < -1 or parents[i] >= i:
            return i
    total = values  # leaf-reward sums first, divided into means below
    count = adv  # leaf counts (as floats) until the last loop overwrites them
    total[:] = 0.0
    count[:] = 0.0
    for i in range(n - 1, -1, -1):  # children come after parents: sweep back up the tree
        if count[i] == 0:  # nothing below: a leaf
            total[i] = rewards[i]
            count[i] = 1.0
        p = parents[i]
        if p >= 0:
            total[p] += total[i]
            count[p] += count[i]
    for i in range(n):
        values[i] = total[i] / count[i]
    for i in range(n):  # parents come first, so values[p] is final here
        p = parents[i]
        adv[i] = values[i] - values[p] if p >= 0 else 0.0
    return -1


def tree_credit(parents: npt.ArrayLike, leaf_rewards: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Node values (mean reward of the leaves below each node) and fork-relative advantages
    (``value[child] - value[parent]``; 0 at roots).

    Shapes: ``parents [n]`` (int, -1 for roots, ``parents[i] < i``), ``leaf_rewards [n]`` (read
    at leaves only; internal entries are ignored) -> ``(values [n], advantages [n])`` float64.
    """
    par = _as_int("parents", parents)
    rew = _as_float("leaf_rewards", leaf_rewards)
    if par.shape != rew.shape:
        raise ShapeMismatchError(f"parents {par.shape} and leaf_rewards {rew.shape} must match")
    values = np.empty_like(rew)
    adv = np.empty_like(rew)
    bad = _tree_kernel(par, rew, values, adv)  # checks the order itself: one pass, no temporaries
    if bad >= 0:
        raise KernelInputError(
            f"parents must be in topological order (-1 or an index below the node's own); "
            f"node {bad} has parent {par[bad]}"
        )
    return values, adv
