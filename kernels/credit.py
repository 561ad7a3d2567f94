"""numba kernels for CPU-side credit assignment over ragged, flattened trajectories.

Trajectories are stored flat, one entry per step (a turn, or a token), with ``traj_offsets``
marking where each one starts::

    rewards       [r0 r1 r2 | r3 | | r4 r5]      S = 6 steps, flat
    traj_offsets  [0, 3, 4, 4, 6]                T = 4 trajectories (the third is empty)

Per-turn values are spread over tokens with ``broadcast_to_tokens(values, turn_offsets)``.
Trees (tree rollouts) are flat too: ``parents[i]`` is the index of node i's parent, -1 for a
root, and every parent comes before its children (topological order). A forest is several
trees concatenated with their parent indices shifted by each tree's start.

The loops (``_credit_numba.py``, ``_gigpo_numba.py``) are written by hand because their
data-dependent recurrences (a backward scan per trajectory, a hash grouping of step keys, a
reverse topological sweep) have no vectorised numpy or torch form; numba compiles them once
(``cache=True`` keeps the machine code across runs). Large inputs run on all of numba's threads,
split over independent trajectories, episode groups or trees (``_parallel.py`` says when that
is safe); results are bit-identical whatever the thread count.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from . import _credit_numba as K
from . import _gigpo_numba as G
from ._parallel import parallel_slot
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


def discounted_returns(rewards: npt.ArrayLike, traj_offsets: npt.ArrayLike, gamma: float) -> FloatArray:
    """``G_t = r_t + γ G_{t+1}`` inside each trajectory (``G`` after the last step is 0).

    Shapes: ``rewards [S]``, ``traj_offsets [T + 1]`` -> ``returns [S]`` (float64).
    """
    r = _as_float("rewards", rewards)
    off = _check_offsets("traj_offsets", traj_offsets, r.shape[0])
    g = _check_gamma("gamma", gamma)
    out = np.empty_like(r)
    with parallel_slot(r.shape[0]) as n_chunks:
        if n_chunks:
            K.returns_parallel(r, off, g, out, n_chunks)
        else:
            K.returns_serial(r, off, g, out)
    return out


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
    g, lm = _check_gamma("gamma", gamma), _check_gamma("lam", lam)
    adv, ret = np.empty_like(r), np.empty_like(r)
    with parallel_slot(r.shape[0]) as n_chunks:
        if n_chunks:
            K.gae_parallel(r, v, off, boot, g, lm, adv, ret, n_chunks)
        else:
            K.gae_serial(r, v, off, boot, g, lm, adv, ret)
    return adv, ret


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
    ``normalize_std=False``. A step group of one step gets 0: it has no peer to be compared
    with (GiGPO, Feng et al. 2025; verl-agent's ``step_norm_reward`` does the same).

    Shapes: ``step_scores [S]`` (e.g. discounted returns), ``group_ids [S]``, ``state_ids [S]``
    (int64 state hashes) -> ``(advantages [S] float64, anchor_ids [S] int64)``; anchor ids
    number the step groups 0..K-1: by episode group (in id order when the ids are non-negative
    and below ``S``, else in order of first appearance), then by state in order of first
    appearance within the group.
    """
    scores = _as_float("step_scores", step_scores)
    groups = _as_int("group_ids", group_ids)
    states = _as_int("state_ids", state_ids)
    if not scores.shape == groups.shape == states.shape:
        raise ShapeMismatchError(
            f"step_scores {scores.shape}, group_ids {groups.shape} and state_ids {states.shape} must match"
        )
    n = scores.shape[0]
    adv, anchor = np.empty_like(scores), np.empty(n, dtype=np.int64)
    if n == 0:
        return adv, anchor
    lo, hi, ordered = G.scan_ids(groups)
    if lo >= 0 and hi < n:  # already small non-negative ids: no hashing
        gid, n_groups = groups, int(hi) + 1
    else:
        gid = np.empty(n, dtype=np.int64)
        n_groups = G.intern(groups, gid)
        ordered = bool(G.scan_ids(gid)[2])
    # Steps of one group side by side (the usual layout) need no reordering.
    if ordered:
        order, start = gid[:0], G.group_starts(gid, n_groups)
    else:
        order, start = G.sort_by_group(gid, n_groups)
    eps_, use_std = float(eps), bool(normalize_std)
    with parallel_slot(n) as n_chunks:
        if n_chunks:
            G.groups_parallel(states, scores, order, ordered, start, eps_, use_std, adv, anchor, n_chunks)
        else:
            G.groups_serial(states, scores, order, ordered, start, eps_, use_std, adv, anchor)
    return adv, anchor


# ─── (3) tree node values and fork-relative advantages ──────────────────────────────────


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
    # The kernels check the order themselves, in the pass that clears their scratch.
    bad = K.TREE_OPEN
    with parallel_slot(par.shape[0]) as n_chunks:
        if n_chunks:
            status = K.tree_parallel(par, rew, values, adv, n_chunks)
            # the first bad node of the chunk that holds the first bad node overall
            bad = (
                K.TREE_OPEN
                if (status == K.TREE_OPEN).any()
                else min((int(x) for x in status if x >= 0), default=K.TREE_OK)
            )
    if bad == K.TREE_OPEN:  # small input, or trees that are not contiguous runs of nodes
        bad = K.tree_serial(par, rew, values, adv)
    if bad >= 0:
        raise KernelInputError(
            f"parents must be in topological order (-1 or an index below the node's own); "
            f"node {bad} has parent {par[bad]}"
        )
    return values, adv
