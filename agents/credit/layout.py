"""The two layouts every estimator converts between, and the checks on them.

verl's token-level batch (what a registered estimator receives; `arborl.trainer.dataproto`
builds it)::

    response_mask       | 1 1 1 0 0 0 1 1 | 0 0 |   each run of 1s is one model turn
    token_level_rewards | 0 0 a 0 0 0 0 b | 0 0 |   each turn's reward on its last token
    index [B]            the group id of each row (episodes of one task / one tree)

Flat turns (what the formulas and the fast loops take): one entry per step (a turn), the
trajectories one after another, ``traj_offsets`` marking where each one starts::

    rewards       [r0 r1 r2 | r3 | | r4 r5]      S = 6 steps, flat
    traj_offsets  [0, 3, 4, 4, 6]                T = 4 trajectories (the third is empty)

`turn_spans` and `turn_rewards` go from the first to the second; `to_tokens` spreads per-turn
values back over each turn's tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from arborl.kernels.errors import DTypeMismatchError, KernelInputError, ShapeMismatchError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class CreditError(ValueError):
    """An estimator is missing what it needs (the message says which batch field)."""


# ─── flat turns: checks ──────────────────────────────────────────────────────────────────


def as_float(name: str, x: npt.ArrayLike) -> FloatArray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ShapeMismatchError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size and not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise DTypeMismatchError(f"{name} must be numeric, got {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.float64)


def as_int(name: str, x: npt.ArrayLike) -> IntArray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ShapeMismatchError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise DTypeMismatchError(f"{name} must be an integer array, got {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def check_offsets(name: str, offsets: npt.ArrayLike, n: int) -> IntArray:
    off = as_int(name, offsets)
    if off.size == 0 or off[0] != 0 or off[-1] != n:
        raise KernelInputError(
            f"{name} must start at 0 and end at the number of steps ({n}), got {off[:3]}..."
        )
    if np.any(np.diff(off) < 0):
        raise KernelInputError(f"{name} must be non-decreasing")
    return off


def check_gamma(name: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise KernelInputError(f"{name} must lie in [0, 1], got {value}")
    return float(value)


def offsets_of(lengths: list[int]) -> IntArray:
    """``[0, l0, l0 + l1, ...]``: the offsets of trajectories of these lengths."""
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def broadcast_to_tokens(per_turn: npt.ArrayLike, turn_offsets: npt.ArrayLike) -> FloatArray:
    """Spread one value per turn over that turn's tokens: ``[n_turns]`` -> ``[n_tokens]``.

    ``turn_offsets [n_turns + 1]`` gives each turn's token range (np.repeat does the work).
    """
    vals = as_float("per_turn", per_turn)
    off = as_int("turn_offsets", turn_offsets)
    if off.shape[0] != vals.shape[0] + 1 or (off.size and off[0] != 0) or np.any(np.diff(off) < 0):
        raise KernelInputError("turn_offsets must be [n_turns + 1], start at 0 and be non-decreasing")
    return np.repeat(vals, np.diff(off))


# ─── verl's token rows <-> turns ────────────────────────────────────────────────────────


def turn_spans(response_mask: torch.Tensor) -> list[list[tuple[int, int]]]:
    """Per row, the ``[start, end)`` of each run of 1s in the mask: the turns."""
    m = response_mask.detach().to(torch.int8).cpu().numpy()
    padded = np.pad(m, ((0, 0), (1, 1)))
    edges = np.diff(padded, axis=1)
    out = []
    for row in edges:
        starts, ends = np.flatnonzero(row == 1), np.flatnonzero(row == -1)
        out.append(list(zip(starts.tolist(), ends.tolist(), strict=True)))
    return out


def turn_rewards(rewards: torch.Tensor, spans: list[list[tuple[int, int]]]) -> list[np.ndarray]:
    """Per row, each turn's reward (the sum over its tokens)."""
    r = rewards.detach().to(torch.float64).cpu().numpy()
    return [np.array([r[i, a:b].sum() for a, b in row]) for i, row in enumerate(spans)]


def to_tokens(
    per_turn: list[np.ndarray], spans: list[list[tuple[int, int]]], like: torch.Tensor
) -> torch.Tensor:
    """Per-turn values of each row spread over the turn's tokens; 0 elsewhere (float32)."""
    out = torch.zeros_like(like, dtype=torch.float32)
    for i, (vals, row) in enumerate(zip(per_turn, spans, strict=True)):
        if row:
            tokens = broadcast_to_tokens(vals, offsets_of([b - a for a, b in row]))
            cols = np.concatenate([np.arange(a, b) for a, b in row])
            out[i, torch.from_numpy(cols)] = torch.from_numpy(tokens).float()
    return out


def split_rows(flat: np.ndarray, lengths: list[int]) -> list[np.ndarray]:
    """Flat per-turn values cut back into one array per row."""
    return np.split(flat, np.cumsum(lengths)[:-1]) if lengths else []


def row_groups(index: Any, n: int) -> IntArray:
    """Dense ids ``0..G-1`` of the rows' groups (verl's ``index``: the ``uid`` of each row)."""
    if index is None:
        raise CreditError("this estimator needs `index` (the group id of each row, uid in verl)")
    _, ids = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
    if ids.shape[0] != n:
        raise CreditError(f"index has {ids.shape[0]} entries for {n} rows")
    return ids.astype(np.int64)


def option(given: Any, config: Any, key: str, default: Any) -> Any:
    """An estimator's option: the keyword when given, else ``config.<key>`` (a mapping or an
    object, verl's ``AlgoConfig``), else the default."""
    if given is not None:
        return given
    if config is None:
        return default
    value = config.get(key, default) if isinstance(config, Mapping) else getattr(config, key, default)
    return default if value is None else value
