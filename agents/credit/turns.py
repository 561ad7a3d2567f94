"""Turn returns: discounted returns over a trajectory's turns, the ``turn_returns`` estimator,
and GAE over turns.

``turn_returns`` (registered into verl) gives each turn its discounted return, less the mean
episode return of the row's group::

    G_t = r_t + γ G_{t+1} = Σ_{k ≥ t} γ^(k-t) r_k        A_t = G_t - mean_{rows j of the group} G_0(j)

verl's own driver passes exactly what it needs (rewards, mask, index), so it runs there as is.
GAE over turns (Schulman et al., 2016) is the same backward recurrence with a critic's values;
no estimator uses it yet. The layouts: `arborl.agents.credit.layout`.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from numba import njit, prange
from verl.trainer.ppo.core_algos import register_adv_est

from arborl.kernels.errors import ShapeMismatchError

from ._parallel import parallel_slot, split_point
from .layout import (
    FloatArray,
    as_float,
    check_gamma,
    check_offsets,
    offsets_of,
    option,
    row_groups,
    split_rows,
    to_tokens,
    turn_rewards,
    turn_spans,
)
from .registry import register_step_level

# ─── the formula ─────────────────────────────────────────────────────────────────────────


def discounted_returns_formula(
    rewards: npt.ArrayLike, traj_offsets: npt.ArrayLike, gamma: float
) -> FloatArray:
    """``G_t = Σ_{k ≥ t} γ^(k-t) r_k`` inside each trajectory, as written (quadratic in its
    length): what `discounted_returns` computes in one backward pass."""
    r = np.asarray(rewards, dtype=np.float64)
    out = np.zeros_like(r)
    for a, b in itertools.pairwise(np.asarray(traj_offsets)):
        for t in range(a, b):
            out[t] = np.sum(gamma ** np.arange(b - t) * r[t:b])
    return out


def gae_formula(
    rewards: npt.ArrayLike,
    values: npt.ArrayLike,
    traj_offsets: npt.ArrayLike,
    gamma: float,
    lam: float,
    bootstrap_values: npt.ArrayLike | None = None,
) -> tuple[FloatArray, FloatArray]:
    """``δ_t = r_t + γ V_{t+1} - V_t``, ``A_t = Σ_{l ≥ 0} (γλ)^l δ_{t+l}`` (Schulman et al. 2016,
    eq. 16), returns ``A_t + V_t``; ``V`` after a trajectory's last step is its bootstrap value
    (0: terminal). What `gae` computes in one backward pass."""
    r, v = np.asarray(rewards, dtype=np.float64), np.asarray(values, dtype=np.float64)
    off = np.asarray(traj_offsets)
    boot = (
        np.zeros(len(off) - 1) if bootstrap_values is None else np.asarray(bootstrap_values, dtype=np.float64)
    )
    adv = np.zeros_like(r)
    for k, (a, b) in enumerate(itertools.pairwise(off)):
        next_v = np.append(v[a + 1 : b], boot[k])
        delta = r[a:b] + gamma * next_v - v[a:b]
        for t in range(b - a):
            adv[a + t] = np.sum((gamma * lam) ** np.arange(b - a - t) * delta[t:])
    return adv, adv + v


def baseline_by_group(first_returns: np.ndarray, groups: np.ndarray | None) -> np.ndarray:
    """Per row, the mean first-turn return of its group (0 without groups)."""
    if groups is None:
        return np.zeros_like(first_returns)
    return (np.bincount(groups, weights=first_returns) / np.bincount(groups))[groups]


# ─── the fast loops ──────────────────────────────────────────────────────────────────────

# Each loop is one ``*_range`` function over a slice of trajectories, plus two drivers:
# ``*_serial`` runs it over everything, ``*_parallel`` cuts the trajectories into ``n_chunks``
# slices of about equal step count and runs them under ``prange`` (one per thread). A slice is
# computed by the very same code in both, so results are bit-identical whatever the thread
# count. Separate functions, not one compiled twice: numba's ``cache=True`` files are keyed by
# the function, and two builds of one function would collide.

# fastmath "contract" only lets LLVM fuse a*b + c into one FMA (one rounding instead of two):
# the backward recurrences are latency-bound, and this halves their critical path.
_FMA = {"contract"}

# The recurrences below are unrolled by two steps: G_{i-1} = (r_{i-1} + γ r_i) + γ² G_{i+1} puts one
# FMA per two steps on the loop-carried dependency chain instead of one per step (the chain's
# latency, not memory, bounded the one-step loop). It rounds differently from the one-step
# form by a few ulp, the same size as the one-step form's own rounding.
# Trajectories are visited last to first, so that with each one scanned backwards the whole
# loop walks memory in one descending stream, which the hardware prefetcher follows; visited
# first to last, the short backward runs with a jump forward between them defeated it (GAE
# over 1M steps ran at 3.5 ns per step out of cache against 1.4 ns in cache).


@njit(cache=True, nogil=True, fastmath=_FMA)
def _returns_range(rewards, offsets, gamma, out, k0, k1):  # pragma: no cover - compiled
    g2 = gamma * gamma
    for k in range(k1 - 1, k0 - 1, -1):  # last trajectory first: see above
        a, i = offsets[k], offsets[k + 1] - 1
        acc = 0.0
        if (i - a) % 2 == 0 and i >= a:  # odd length: the last step alone, then pairs
            acc = rewards[i]
            out[i] = acc
            i -= 1
        while i > a:  # steps i and i - 1
            r1 = rewards[i]
            out[i] = r1 + gamma * acc
            acc = (rewards[i - 1] + gamma * r1) + g2 * acc
            out[i - 1] = acc
            i -= 2


@njit(cache=True, nogil=True)
def returns_serial(rewards, offsets, gamma, out):  # pragma: no cover - compiled
    _returns_range(rewards, offsets, gamma, out, 0, offsets.shape[0] - 1)


@njit(cache=True, nogil=True, parallel=True)
def returns_parallel(rewards, offsets, gamma, out, n_chunks):  # pragma: no cover - compiled
    for c in prange(n_chunks):
        k0, k1 = split_point(offsets, c, n_chunks), split_point(offsets, c + 1, n_chunks)
        _returns_range(rewards, offsets, gamma, out, k0, k1)


@njit(cache=True, nogil=True, fastmath=_FMA)
def _gae_range(rewards, values, offsets, bootstrap, gamma, lam, adv, ret, k0, k1):  # pragma: no cover
    gl = gamma * lam
    gl2 = gl * gl
    for k in range(k1 - 1, k0 - 1, -1):  # last trajectory first: see above
        a, i = offsets[k], offsets[k + 1] - 1
        next_value = bootstrap[k]
        acc = 0.0
        if (i - a) % 2 == 0 and i >= a:  # odd length: the last step alone, then pairs
            v = values[i]
            acc = rewards[i] + gamma * next_value - v
            adv[i] = acc
            ret[i] = acc + v  # returns in the same pass: no second sweep over the arrays
            next_value = v
            i -= 1
        while i > a:  # steps i and i - 1
            v1, v0 = values[i], values[i - 1]
            d1 = rewards[i] + gamma * next_value - v1
            d0 = rewards[i - 1] + gamma * v1 - v0
            a1 = d1 + gl * acc
            acc = (d0 + gl * d1) + gl2 * acc
            adv[i], ret[i] = a1, a1 + v1
            adv[i - 1], ret[i - 1] = acc, acc + v0
            next_value = v0
            i -= 2


@njit(cache=True, nogil=True)
def gae_serial(rewards, values, offsets, bootstrap, gamma, lam, adv, ret):  # pragma: no cover
    _gae_range(rewards, values, offsets, bootstrap, gamma, lam, adv, ret, 0, offsets.shape[0] - 1)


@njit(cache=True, nogil=True, parallel=True)
def gae_parallel(rewards, values, offsets, bootstrap, gamma, lam, adv, ret, n_chunks):  # pragma: no cover
    for c in prange(n_chunks):
        k0, k1 = split_point(offsets, c, n_chunks), split_point(offsets, c + 1, n_chunks)
        _gae_range(rewards, values, offsets, bootstrap, gamma, lam, adv, ret, k0, k1)


def discounted_returns(rewards: npt.ArrayLike, traj_offsets: npt.ArrayLike, gamma: float) -> FloatArray:
    """``G_t = r_t + γ G_{t+1}`` inside each trajectory (``G`` after the last step is 0).

    Shapes: ``rewards [S]``, ``traj_offsets [T + 1]`` -> ``returns [S]`` (float64).
    """
    r = as_float("rewards", rewards)
    off = check_offsets("traj_offsets", traj_offsets, r.shape[0])
    g = check_gamma("gamma", gamma)
    out = np.empty_like(r)
    with parallel_slot(r.shape[0]) as n_chunks:
        if n_chunks:
            returns_parallel(r, off, g, out, n_chunks)
        else:
            returns_serial(r, off, g, out)
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
    r = as_float("rewards", rewards)
    v = as_float("values", values)
    if v.shape != r.shape:
        raise ShapeMismatchError(f"values {v.shape} must match rewards {r.shape}")
    off = check_offsets("traj_offsets", traj_offsets, r.shape[0])
    n_traj = off.shape[0] - 1
    boot = np.zeros(n_traj) if bootstrap_values is None else as_float("bootstrap_values", bootstrap_values)
    if boot.shape != (n_traj,):
        raise ShapeMismatchError(f"bootstrap_values must be [T] = [{n_traj}], got {boot.shape}")
    g, lm = check_gamma("gamma", gamma), check_gamma("lam", lam)
    adv, ret = np.empty_like(r), np.empty_like(r)
    with parallel_slot(r.shape[0]) as n_chunks:
        if n_chunks:
            gae_parallel(r, v, off, boot, g, lm, adv, ret, n_chunks)
        else:
            gae_serial(r, v, off, boot, g, lm, adv, ret)
    return adv, ret


# ─── the registration ────────────────────────────────────────────────────────────────────


@register_adv_est("turn_returns")
def compute_turn_returns_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    gamma: float | None = None,
    epsilon: float = 1e-6,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn-level discounted returns, broadcast to each turn's tokens.

    ``G_t = r_t + γ G_{t+1}`` over the turns of a row (γ: ``gamma``, else ``config.gamma``,
    else 1). Advantage ``A_t = G_t - b``, where the baseline ``b`` is the mean episode return
    ``G_0`` of the row's group (no baseline when ``index`` is None). Returns ``(A, G)``.
    """
    g = float(option(gamma, config, "gamma", 1.0))
    spans = turn_spans(response_mask)
    per_turn = turn_rewards(token_level_rewards, spans)
    lengths = [len(p) for p in per_turn]
    ret = discounted_returns(np.concatenate(per_turn) if per_turn else [], offsets_of(lengths), g)
    split = split_rows(ret, lengths)
    first = np.array([s[0] if len(s) else 0.0 for s in split])
    groups = None if index is None else row_groups(index, len(first))
    baseline = baseline_by_group(first, groups)
    adv = [s - b for s, b in zip(split, baseline, strict=True)]
    return to_tokens(adv, spans, token_level_rewards), to_tokens(list(split), spans, token_level_rewards)


register_step_level("turn_returns")
