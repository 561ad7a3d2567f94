"""Input validation shared by every log-prob backend (one place, one set of messages)."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .errors import DeviceMismatchError, DTypeMismatchError, KernelInputError, ShapeMismatchError

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
INDEX_DTYPES = (torch.int64, torch.int32)


class FlatLogprobInputs(NamedTuple):
    """Validated inputs with the token dimensions flattened: ``hidden [N, d]``, ``targets [N]``."""

    hidden: torch.Tensor
    weight: torch.Tensor
    targets: torch.Tensor
    bias: torch.Tensor | None
    temperature: float
    token_shape: torch.Size


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Dtype the kernels accumulate and return in: float64 stays float64, all else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_logprob_inputs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    bias: torch.Tensor | None,
    temperature: float,
) -> FlatLogprobInputs:
    """Validate the fused log-prob inputs and flatten ``hidden [..., d]`` to ``[N, d]``.

    Raises:
        ShapeMismatchError: ``hidden[..., d]`` / ``weight[V, d]`` / ``targets[...]`` / ``bias[V]`` disagree.
        DTypeMismatchError: non-float ``hidden``/``weight``/``bias``, mixed float dtypes, or
            non-integer ``targets``.
        DeviceMismatchError: the tensors are not all on one device.
        KernelInputError: ``temperature`` is not a finite positive number, or a target id is outside
            ``[0, V)`` (checked on CPU only: on CUDA the check would force a device sync).
    """
    for name, t in (("hidden", hidden), ("weight", weight), ("bias", bias)):
        if t is not None and t.dtype not in FLOAT_DTYPES:
            raise DTypeMismatchError(f"{name} must be one of {FLOAT_DTYPES}, got {t.dtype}")
    if weight.dtype != hidden.dtype:
        raise DTypeMismatchError(
            f"hidden ({hidden.dtype}) and weight ({weight.dtype}) must share a dtype; cast one of them"
        )
    if bias is not None and bias.dtype != weight.dtype:
        raise DTypeMismatchError(f"bias ({bias.dtype}) must have weight's dtype ({weight.dtype})")
    if targets.dtype not in INDEX_DTYPES:
        raise DTypeMismatchError(f"targets must be int64 or int32 token ids, got {targets.dtype}")

    if weight.dim() != 2:
        raise ShapeMismatchError(f"weight must be [V, d], got shape {tuple(weight.shape)}")
    vocab, d = weight.shape
    if vocab == 0 or d == 0:
        raise ShapeMismatchError(f"weight must have V > 0 and d > 0, got shape {tuple(weight.shape)}")
    if hidden.dim() < 1 or hidden.shape[-1] != d:
        raise ShapeMismatchError(
            f"hidden must be [..., d] with d = weight.shape[1] = {d}, got shape {tuple(hidden.shape)}"
        )
    if tuple(targets.shape) != tuple(hidden.shape[:-1]):
        raise ShapeMismatchError(
            f"targets must have hidden's leading shape {tuple(hidden.shape[:-1])}, got {tuple(targets.shape)}"
        )
    if bias is not None and tuple(bias.shape) != (vocab,):
        raise ShapeMismatchError(f"bias must be [V] = [{vocab}], got shape {tuple(bias.shape)}")

    devices = {t.device for t in (hidden, weight, targets, bias) if t is not None}
    if len(devices) > 1:
        raise DeviceMismatchError(f"hidden, weight, targets and bias must share a device, got {devices}")

    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise KernelInputError(f"temperature must be a float, got {type(temperature).__name__}")
    if not (math.isfinite(temperature) and temperature > 0):
        raise KernelInputError(f"temperature must be finite and > 0, got {temperature}")

    flat_targets = targets.reshape(-1)
    if flat_targets.device.type == "cpu" and flat_targets.numel() > 0:
        lo, hi = int(flat_targets.min()), int(flat_targets.max())
        if lo < 0 or hi >= vocab:
            raise KernelInputError(
                f"target ids must lie in [0, V={vocab}), got min {lo} max {hi}; "
                "mask padding positions out instead of passing ignore ids"
            )
    return FlatLogprobInputs(
        hidden=hidden.reshape(-1, d),
        weight=weight,
        targets=flat_targets,
        bias=bias,
        temperature=float(temperature),
        token_shape=targets.shape,
    )


def check_chunk(name: str, value: int) -> int:
    """A chunk size must be a positive int."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise KernelInputError(f"{name} must be a positive int, got {value!r}")
    return value
