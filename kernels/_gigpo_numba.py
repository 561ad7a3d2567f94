"""numba kernels behind ``gigpo_step_advantages``: anchor-state groups and their normalisation.

Pipeline (``S`` steps, ``G`` episode groups)::

    group ids ──scan_ids──▶ dense? sorted? ──(intern: hash arbitrary int64 ids to 0..G-1)──▶ gid
    gid ──group_starts (already sorted) | sort_by_group (counting sort)──▶ order, start [G + 1]
    per episode group (independent: ``prange`` over chunks of groups):
        hash its steps' state ids in a table sized to the group (cache-resident)
        ─▶ local anchor ids, per-anchor count and sum ─▶ mean ─▶ Σ (x - mean)² ─▶ advantages
        ─▶ anchor ids made unique by adding the anchor count of the groups before it

Each episode group is computed by the same code whatever the thread count, so results are
bit-identical with 1 or more threads. Mean and variance take two passes over the group's
steps (cache-resident), not Welford's one: no division per step, and no cancellation either.
Hash tables are written by hand because numba offers only its typed dict, a general-purpose
map; a flat open-addressing table sized to one group stays in L1 cache.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._credit_numba import split_point


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
