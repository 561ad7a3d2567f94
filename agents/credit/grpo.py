"""GRPO's group-relative normalisation (Shao et al., 2024, "DeepSeekMath", §4.1.2).

Each score is compared with the other members of its group (the episodes of one task)::

    A_i = (x_i - mean_{j in group(i)} x_j) / (std_{j in group(i)} x_j + ε)      std unbiased

or ``x_i - mean`` alone (Dr. GRPO, Liu et al. 2025: no division by the std).

verl registers ``grpo`` itself (``core_algos.compute_grpo_outcome_advantage``, one outcome per
row): arborl runs verl's and registers no second one. What lives here is the formula GiGPO
applies twice, to episodes and to anchor-state groups (`arborl.agents.credit.gigpo`); the
episode term equals verl's ``grpo`` (tests/agents/test_gigpo.py). It is numpy's ``bincount``
over dense group ids, already one vectorised pass: there is no loop to make fast.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

LoneMean = Literal["zero", "self"]


def group_normalise(
    scores: np.ndarray, keys: np.ndarray, lone_mean: LoneMean, use_std: bool, eps: float
) -> np.ndarray:
    """``(x - mean_k) [/ (std_k + eps)]`` within each key (any hashable numpy values).

    A key of one member has no peer: its mean is 0 (``lone_mean="zero"``: GRPO's and
    verl-agent's episode rule, the score is kept) or the member itself (``"self"``: its
    advantage is 0, GiGPO's step rule). std is unbiased, 1 for one member.
    """
    _, ids = np.unique(keys, return_inverse=True)
    counts = np.bincount(ids).astype(np.float64)
    means = np.bincount(ids, weights=scores) / counts
    if lone_mean == "zero":
        means = np.where(counts > 1, means, 0.0)
    out = scores - means[ids]
    if use_std:
        sq = np.bincount(ids, weights=(scores - means[ids]) ** 2)
        std = np.where(counts > 1, np.sqrt(sq / np.maximum(counts - 1, 1)), 1.0)
        out = out / (std[ids] + eps)
    return out
