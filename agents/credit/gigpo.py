"""GiGPO (Feng et al., 2025, "Group-in-Group Policy Optimization", eq. 3-8): the ``gigpo`` estimator.

For turn ``t`` of episode ``i`` (episode group: the episodes of one task, verl's ``index``)::

    A_E(i)      = GRPO over the group's episode totals R_i = Σ_t r_{i,t}                 (eq. 3)
    G_{i,t}     = Σ_{k ≥ t} γ^(k-t) r_{i,k}                                               (eq. 5)
    anchor(i,t) = the turns (j, u) of the same episode group with s_{j,u} = s_{i,t}       (eq. 6)
    A_S(i,t)    = GRPO over the anchor group's returns G; 0 when the turn is alone in it  (eq. 7)
    A(i,t)      = A_E(i) + ω · A_S(i,t)                                                   (eq. 8)

``s_{i,t}`` is the env state the turn was taken from (``anchor_state_hashes``: the state after
reset for a first turn), so different actions from one state are compared. GRPO's
normalisation is `arborl.agents.credit.grpo.group_normalise`; the returns come from
`arborl.agents.credit.turns`. The step groups are the expensive part: a hash grouping of
(episode group, state) keys, written below as a formula and then as a fast loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from numba import njit, prange
from verl.trainer.ppo.core_algos import register_adv_est

from arborl.kernels.errors import ShapeMismatchError

from ._parallel import parallel_slot, split_point
from .anchors import VERL_AGENT_SIMILARITY_THRESH, anchor_state_ids
from .grpo import group_normalise
from .layout import (
    CreditError,
    FloatArray,
    IntArray,
    as_float,
    as_int,
    check_gamma,
    offsets_of,
    option,
    row_groups,
    split_rows,
    to_tokens,
    turn_rewards,
    turn_spans,
)
from .registry import register_step_level
from .turns import discounted_returns

#: GiGPO's default discount: verl-agent's recipes (``run_sokoban.sh``, ``run_alfworld.sh``,
#: ``run_webshop.sh``) all set ``algorithm.gamma=0.95``. With γ = 1 and a terminal reward every
#: visit to a state has the same return, so a turn that loops (a locked door, a wall) is never
#: told from one that moves on: the step term is then blind exactly where it should act.
GIGPO_GAMMA = 0.95

#: GiGPO's normalisations (verl-agent's ``mode``): ``mean_norm`` subtracts the group mean
#: (verl-agent's default), ``mean_std_norm`` also divides by the group's std (+ ε).
GIGPO_MODES = ("mean_norm", "mean_std_norm")

#: Whose mean (and std) ``A_E`` subtracts: ``trajectory`` (the paper's eq. 3, the default),
#: each trajectory of the group once; ``step_rows`` (verl-agent's ``episode_norm_reward``,
#: where each turn is a batch row carrying its episode's return), each trajectory once per
#: turn, so long trajectories weigh more.
EPISODE_NORMS = ("trajectory", "step_rows")

# ─── the formula ─────────────────────────────────────────────────────────────────────────


def gigpo_step_advantages_formula(
    step_scores: npt.ArrayLike,
    group_ids: npt.ArrayLike,
    state_ids: npt.ArrayLike,
    eps: float = 1e-6,
    normalize_std: bool = True,
) -> FloatArray:
    """``A_S`` (eq. 6-7): GRPO's normalisation within each anchor group, the steps with equal
    ``(group_id, state_id)``; a step alone in its anchor group gets 0. What
    `gigpo_step_advantages` computes with hash tables."""
    scores = np.asarray(step_scores, dtype=np.float64)
    _, group = np.unique(np.asarray(group_ids, dtype=np.int64), return_inverse=True)
    _, state = np.unique(np.asarray(state_ids, dtype=np.int64), return_inverse=True)
    anchor = group * (state.max(initial=0) + 1) + state  # one key per (group, state)
    return group_normalise(scores, anchor, "self", normalize_std, eps)


# ─── the fast loop ───────────────────────────────────────────────────────────────────────

# Pipeline (``S`` steps, ``G`` episode groups)::
#
#     group ids ──scan_ids──▶ dense? sorted? ──(intern: hash arbitrary int64 ids to 0..G-1)──▶ gid
#     gid ──group_starts (already sorted) | sort_by_group (counting sort)──▶ order, start [G + 1]
#     per episode group (independent: ``prange`` over chunks of groups):
#         hash its steps' state ids in a table sized to the group (cache-resident)
#         ─▶ local anchor ids, per-anchor count and sum ─▶ mean ─▶ Σ (x - mean)² ─▶ advantages
#         ─▶ anchor ids made unique by adding the anchor count of the groups before it
#
# Each episode group is computed by the same code whatever the thread count, so results are
# bit-identical with 1 or more threads. Mean and variance take two passes over the group's
# steps (cache-resident), not Welford's one: no division per step, and no cancellation either.
# Hash tables are written by hand because numba offers only its typed dict, a general-purpose
# map; a flat open-addressing table sized to one group stays in L1 cache.


@njit(cache=True, nogil=True)
def scan_ids(ids):  # pragma: no cover - compiled
    """``(min, max, non-decreasing?)`` of a non-empty int64 array, in one pass."""
    lo = hi = ids[0]
    ordered = True
    for i in range(1, ids.shape[0]):
        x = ids[i]
        if x < ids[i - 1]:
            ordered = False
        lo = min(lo, x)
        hi = max(hi, x)
    return lo, hi, ordered


@njit(cache=True, nogil=True)
def _probe(keys, ids, key):  # pragma: no cover - compiled
    """Slot of ``key`` in an open-addressing table (``ids == -1``: free): its own or the first free."""
    mask = ids.shape[0] - 1
    h = key * 0x9E3779B97F4A7C1  # int64 multiply wraps: an odd multiplier mixes the bits
    j = (h ^ (h >> 29)) & mask
    while ids[j] != -1 and keys[j] != key:
        j = (j + 1) & mask  # linear probing
    return j


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
def intern(values, out):  # pragma: no cover - compiled
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


@njit(cache=True, nogil=True)
def group_starts(gid, n_groups):  # pragma: no cover - compiled
    """``start [G + 1]``: the prefix sums of the group sizes; when ``gid`` is non-decreasing,
    group g is steps ``start[g]:start[g+1]``."""
    start = np.zeros(n_groups + 1, dtype=np.int64)
    for i in range(gid.shape[0]):
        start[gid[i] + 1] += 1
    for g in range(n_groups):
        start[g + 1] += start[g]
    return start


@njit(cache=True, nogil=True)
def sort_by_group(gid, n_groups):  # pragma: no cover - compiled
    """Stable counting sort: ``order`` lists the steps group by group; ``start`` as above."""
    start = group_starts(gid, n_groups)
    order = np.empty(gid.shape[0], dtype=np.int64)
    fill = start[:-1].copy()
    for i in range(gid.shape[0]):
        order[fill[gid[i]]] = i
        fill[gid[i]] += 1
    return order, start


@njit(cache=True, nogil=True)
def _groups_range(
    states, scores, order, sorted_, start, g0, g1, eps, use_std, adv, anchor
):  # pragma: no cover
    """Advantages of episode groups ``[g0, g1)``, and anchor ids numbered from 0 over those
    groups; returns how many anchors they have."""
    largest = 0
    for g in range(g0, g1):
        largest = max(largest, start[g + 1] - start[g])
    size = 16
    while size < 2 * largest:
        size *= 2
    keys, ids = np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64)
    count, mean, scale = np.empty(largest), np.empty(largest), np.empty(largest)
    base = 0
    for g in range(g0, g1):
        a, b = start[g], start[g + 1]
        width = 16
        while width < 2 * (b - a):
            width *= 2
        tk, ti = keys[:width], ids[:width]
        ti[:] = -1
        k = 0
        for q in range(a, b):  # pass 1: anchor ids (local to the group), counts, sums
            i = q if sorted_ else order[q]
            j = _probe(tk, ti, states[i])
            if ti[j] == -1:
                tk[j], ti[j] = states[i], k
                count[k] = mean[k] = scale[k] = 0.0
                k += 1
            loc = ti[j]
            anchor[i] = loc
            count[loc] += 1.0
            mean[loc] += scores[i]
        for loc in range(k):
            # a lone step is its own mean: advantage 0, there is nothing to compare it with
            # (GiGPO's rule, as verl-agent's step_norm_reward; std 1 below)
            mean[loc] = mean[loc] / count[loc]
        if use_std:
            for q in range(a, b):  # pass 2: squared deviations (scale holds Σ (x - mean)² here)
                i = q if sorted_ else order[q]
                d = scores[i] - mean[anchor[i]]
                scale[anchor[i]] += d * d
            for loc in range(k):
                std = np.sqrt(scale[loc] / (count[loc] - 1.0)) if count[loc] > 1.0 else 1.0
                scale[loc] = std + eps
        for q in range(a, b):  # pass 3: advantages, and the anchor ids made unique
            i = q if sorted_ else order[q]
            loc = anchor[i]
            adv[i] = (scores[i] - mean[loc]) / scale[loc] if use_std else scores[i] - mean[loc]
            anchor[i] = loc + base
        base += k
    return base


@njit(cache=True, nogil=True)
def groups_serial(states, scores, order, sorted_, start, eps, use_std, adv, anchor):  # pragma: no cover
    return _groups_range(
        states, scores, order, sorted_, start, 0, start.shape[0] - 1, eps, use_std, adv, anchor
    )


@njit(cache=True, nogil=True, parallel=True)
def groups_parallel(
    states, scores, order, sorted_, start, eps, use_std, adv, anchor, n_chunks
):  # pragma: no cover
    """As ``groups_serial``, with each chunk of groups numbering its anchors from 0; a second
    parallel pass shifts the ids of chunk c by the anchor count of the chunks before it."""
    n_anchors = np.empty(n_chunks, dtype=np.int64)
    for c in prange(n_chunks):
        g0, g1 = split_point(start, c, n_chunks), split_point(start, c + 1, n_chunks)
        n_anchors[c] = _groups_range(states, scores, order, sorted_, start, g0, g1, eps, use_std, adv, anchor)
    for c in prange(1, n_chunks):
        shift = n_anchors[:c].sum()
        for q in range(start[split_point(start, c, n_chunks)], start[split_point(start, c + 1, n_chunks)]):
            anchor[q if sorted_ else order[q]] += shift
    return n_anchors.sum()


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
    scores = as_float("step_scores", step_scores)
    groups = as_int("group_ids", group_ids)
    states = as_int("state_ids", state_ids)
    if not scores.shape == groups.shape == states.shape:
        raise ShapeMismatchError(
            f"step_scores {scores.shape}, group_ids {groups.shape} and state_ids {states.shape} must match"
        )
    n = scores.shape[0]
    adv, anchor = np.empty_like(scores), np.empty(n, dtype=np.int64)
    if n == 0:
        return adv, anchor
    lo, hi, ordered = scan_ids(groups)
    if lo >= 0 and hi < n:  # already small non-negative ids: no hashing
        gid, n_groups = groups, int(hi) + 1
    else:
        gid = np.empty(n, dtype=np.int64)
        n_groups = intern(groups, gid)
        ordered = bool(scan_ids(gid)[2])
    # Steps of one group side by side (the usual layout) need no reordering.
    if ordered:
        order, start = gid[:0], group_starts(gid, n_groups)
    else:
        order, start = sort_by_group(gid, n_groups)
    eps_, use_std = float(eps), bool(normalize_std)
    with parallel_slot(n) as n_chunks:
        if n_chunks:
            groups_parallel(states, scores, order, ordered, start, eps_, use_std, adv, anchor, n_chunks)
        else:
            groups_serial(states, scores, order, ordered, start, eps_, use_std, adv, anchor)
    return adv, anchor


# ─── the registration ────────────────────────────────────────────────────────────────────


@register_adv_est("gigpo")
def compute_gigpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    anchor_state_hashes: Any = None,
    step_weight: float | None = None,
    gamma: float | None = None,
    mode: str | None = None,
    episode_norm: str | None = None,
    anchor_observations: Any = None,
    enable_similarity: bool | None = None,
    similarity_thresh: float | None = None,
    multi_modal_inputs: Any = None,
    epsilon: float = 1e-6,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GiGPO (Feng et al., 2025, eq. 3-8): episode-level plus anchor-state step-level groups.

    For turn ``t`` of row ``i`` (episode group = the rows of one ``index``)::

        A(i, t) = A_E(i) + ω · A_S(i, t)
        A_E(i)    = (R_i - mean_group R) [/ (std_group R + ε)]      R_i = Σ_t r_{i,t} (undiscounted)
        A_S(i, t) = (G_{i,t} - mean_anchor G) [/ (std_anchor G + ε)] G_{i,t} = Σ_k γ^(k-t) r_{i,k}

    The anchor group of a turn is every turn of the same episode group taken from the same
    env state: ``anchor_state_hashes[i][t]`` is the hash of the state turn t *started from*
    (after reset for the first turn), so different actions from one state are compared. A turn
    alone in its anchor group (the common case) gets ``A_S = 0``; an unknown state (``""``)
    never matches anything. A lone episode keeps ``A_E = R`` (mean 0, std 1: GRPO's and
    verl-agent's rule). ``[/ ...]`` only with ``mode="mean_std_norm"``; ``mean_norm`` (the
    default, as verl-agent's) subtracts the mean only. std is unbiased (torch.std).

    Options (keyword, else ``config.<key>``, else the default): ``step_weight``
    (``gigpo_step_weight``, 1), ``gamma`` (``gigpo_gamma``, `GIGPO_GAMMA` = 0.95, verl-agent's
    recipes; verl's own ``gamma`` is GAE's, 1 by default in verl's config, and is not read, so
    that an unset verl key cannot silently turn the discount off), ``mode`` (``gigpo_mode``,
    ``mean_norm``), ``episode_norm`` (``gigpo_episode_norm``, ``trajectory``: see
    `EPISODE_NORMS`), ``enable_similarity`` (``gigpo_enable_similarity``, false) and
    ``similarity_thresh`` (``gigpo_similarity_thresh``, 0.95): with similarity on, anchor groups
    come from the turns' ``anchor_observations`` texts clustered as verl-agent does
    (`arborl.agents.credit.anchors.similar_state_ids`), not from the state hashes. verl-agent's
    GiGPO recipes use ω 1, γ 0.95, ``mean_norm``, ``step_rows``, similarity off. Similarity
    is refused on a batch whose rows showed pictures (``multi_modal_inputs``): it compares the
    observations' text only, and a picture env's state is in its pixels (picture-Sokoban's text
    is one prompt every turn, so every turn would be one anchor).
    Returns ``(A, G)`` per token.
    """
    similar = bool(option(enable_similarity, config, "gigpo_enable_similarity", False))
    if similar and multi_modal_inputs is not None and any(bool(m) for m in multi_modal_inputs):
        raise CreditError(
            "gigpo's similarity grouping (gigpo_enable_similarity) compares the observations' text "
            "only, and this batch's turns showed pictures, whose state is in the pixels: leave it "
            "off, so anchors are the env's state hashes (each env records them whatever it shows)"
        )
    if anchor_state_hashes is None and not similar:
        raise _missing_anchors(kwargs)
    w = float(option(step_weight, config, "gigpo_step_weight", 1.0))
    g = check_gamma("gamma", float(option(gamma, config, "gigpo_gamma", GIGPO_GAMMA)))
    mode = str(option(mode, config, "gigpo_mode", "mean_norm"))
    if mode not in GIGPO_MODES:
        raise CreditError(f"gigpo mode must be one of {GIGPO_MODES}, got {mode!r}")
    norm = str(option(episode_norm, config, "gigpo_episode_norm", "trajectory"))
    if norm not in EPISODE_NORMS:
        raise CreditError(f"gigpo episode_norm must be one of {EPISODE_NORMS}, got {norm!r}")
    use_std = mode == "mean_std_norm"
    spans = turn_spans(response_mask)
    per_turn = turn_rewards(token_level_rewards, spans)
    lengths = [len(p) for p in per_turn]
    groups = row_groups(index, len(lengths))
    returns = discounted_returns(np.concatenate(per_turn) if per_turn else [], offsets_of(lengths), g)
    thresh = float(option(similarity_thresh, config, "gigpo_similarity_thresh", VERL_AGENT_SIMILARITY_THRESH))
    states = anchor_state_ids(
        anchor_state_hashes, anchor_observations, groups, lengths, thresh if similar else None
    )
    step_adv, _ = gigpo_step_advantages(returns, np.repeat(groups, lengths), states, epsilon, use_std)
    totals = np.array([p.sum() for p in per_turn], dtype=np.float64)
    episode = episode_advantages(totals, groups, lengths, norm, use_std, epsilon)
    adv = [episode[i] + w * s for i, s in enumerate(split_rows(step_adv, lengths))]
    ret = split_rows(returns, lengths)
    return to_tokens(adv, spans, token_level_rewards), to_tokens(ret, spans, token_level_rewards)


register_step_level("gigpo")


def episode_advantages(
    totals: FloatArray, groups: IntArray, lengths: list[int], norm: str, use_std: bool, eps: float
) -> FloatArray:
    """``A_E`` per row (eq. 3), its group's statistics taken over the group's trajectories
    (``trajectory``) or over its step rows (``step_rows``: each trajectory's ``R`` counted once
    per turn, as verl-agent's ``episode_norm_reward`` with ``compute_mean_std_cross_steps``)."""
    if norm == "trajectory":
        return group_normalise(totals, groups, "zero", use_std, eps)
    rows = group_normalise(np.repeat(totals, lengths), np.repeat(groups, lengths), "zero", use_std, eps)
    first = offsets_of(lengths)[:-1]
    # a row without turns has no tokens to carry an advantage
    return np.array([rows[a] if n else 0.0 for a, n in zip(first, lengths, strict=True)], dtype=np.float64)


def _missing_anchors(kwargs: dict[str, Any]) -> CreditError:
    hint = (
        " (turn_state_hashes / next_state_hashes are the states *after* each turn, not anchors)"
        if "turn_state_hashes" in kwargs or "next_state_hashes" in kwargs
        else ""
    )
    return CreditError(
        "gigpo needs anchor_state_hashes (per row, the hash of the env state each turn started "
        "from); arborl.trainer.dataproto puts it in non_tensor_batch, arborl's compute_advantages "
        "passes it" + hint
    )
