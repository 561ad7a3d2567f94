"""Functional API of the fused LM-head log-prob + entropy, choosing the backend.

``auto`` picks Triton for CUDA tensors when the ``triton`` package is importable, and the
chunked torch kernel everywhere else. ``triton`` on CPU tensors only works under
``TRITON_INTERPRET=1`` (set before ``arborl.kernels.logprob_triton`` is imported): that is
how CI checks the Triton maths without a GPU.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Literal, NamedTuple

import torch

from ._checks import check_chunk, check_logprob_inputs, compute_dtype
from .errors import BackendUnavailableError, DTypeMismatchError, KernelInputError
from .logprob import DEFAULT_TOKEN_CHUNK, DEFAULT_VOCAB_CHUNK, ChunkedLogprobEntropyFunction

Backend = Literal["auto", "torch", "triton"]
BACKENDS: tuple[str, ...] = ("auto", "torch", "triton")
TRITON_DTYPES = (torch.float32, torch.bfloat16)


class LogprobEntropy(NamedTuple):
    """Per-token outputs, shaped like ``targets`` (float32; float64 for float64 inputs)."""

    logprobs: torch.Tensor
    """``log softmax(h W^T / T)[target]``."""
    entropy: torch.Tensor
    """Entropy of ``softmax(h W^T / T)`` over the whole vocabulary."""


@functools.cache
def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_backend(
    backend: str, device: torch.device, dtype: torch.dtype = torch.float32
) -> Literal["torch", "triton"]:
    """The concrete backend ``fused_logprob_entropy`` runs for ``dtype`` tensors on ``device``."""
    if backend not in BACKENDS:
        raise KernelInputError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "torch":
        return "torch"
    on_cuda = device.type == "cuda"
    if backend == "auto":
        # float64 / float16 stay on the torch kernel: the Triton path is built for float32 and
        # bfloat16 (its bf16 dlogits buffer has float32's range; a float16 one could underflow).
        return "triton" if on_cuda and dtype in TRITON_DTYPES and _triton_available() else "torch"
    if dtype not in TRITON_DTYPES:
        raise DTypeMismatchError(f"backend='triton' takes {TRITON_DTYPES}, got {dtype}; use backend='torch'")
    if not _triton_available():
        raise BackendUnavailableError(
            "backend='triton' needs the triton package: pip install 'arborl[triton]'"
        )
    if not on_cuda:
        loaded = sys.modules.get(f"{__package__}.logprob_triton")
        if os.environ.get("TRITON_INTERPRET") != "1" or (loaded is not None and not loaded.INTERPRET):
            raise BackendUnavailableError(
                f"backend='triton' needs CUDA tensors (got {device}); on CPU, start Python with "
                "TRITON_INTERPRET=1 (it must be set before arborl.kernels.logprob_triton is "
                "imported), or use backend='torch'"
            )
    return "triton"


def fused_logprob_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    bias: torch.Tensor | None = None,
    backend: Backend = "auto",
    token_chunk: int | None = None,
    vocab_chunk: int | None = None,
) -> LogprobEntropy:
    """Per-token log-prob of ``targets`` and entropy of ``softmax((h W^T + b) / T)``, never
    materialising the ``[tokens, vocab]`` logits.

    Shapes::

        hidden  [..., d]  float32 | bfloat16 | float16 | float64   (requires_grad as needed)
        weight  [V, d]    same dtype as hidden                     (the LM head)
        bias    [V]       same dtype, optional
        targets [...]     int64 | int32, values in [0, V)
        ─────────────────────────────────────────────────────────────
        logprobs [...], entropy [...]   float32 (float64 for float64 inputs)

    Both outputs are differentiable with respect to ``hidden``, ``weight`` and ``bias``; the
    backward pass recomputes logits chunk by chunk. Extra memory is ``O(chunk × vocab_chunk)``
    plus the gradient buffers, not ``O(tokens × V)``.

    Args:
        temperature: logits are divided by it before the softmax (rollout sampling temperature).
        backend: ``"auto"`` (Triton on CUDA, chunked torch elsewhere), ``"torch"`` or ``"triton"``.
        token_chunk, vocab_chunk: block sizes; ``None`` takes the backend's default.

    Raises:
        ShapeMismatchError, DTypeMismatchError, DeviceMismatchError, KernelInputError: bad input.
        BackendUnavailableError: ``backend="triton"`` cannot run here.
    """
    flat = check_logprob_inputs(hidden, weight, targets, bias, temperature)
    chosen = resolve_backend(backend, hidden.device, hidden.dtype)
    function: type[torch.autograd.Function] = ChunkedLogprobEntropyFunction
    defaults = (DEFAULT_TOKEN_CHUNK, DEFAULT_VOCAB_CHUNK)
    if chosen == "triton":
        from . import logprob_triton  # imported only when chosen: triton is an optional extra

        function, defaults = logprob_triton.TritonLogprobEntropyFunction, logprob_triton.DEFAULT_TRITON_CHUNKS
    tc = check_chunk("token_chunk", defaults[0] if token_chunk is None else token_chunk)
    vc = check_chunk("vocab_chunk", defaults[1] if vocab_chunk is None else vocab_chunk)
    if flat.hidden.shape[0] == 0:
        # Keep the graph connected so that backward through an empty batch yields zero grads.
        empty = ((flat.hidden.sum() + flat.weight.sum()) * 0).to(compute_dtype(hidden.dtype)).expand(0)
        return LogprobEntropy(empty.reshape(flat.token_shape), empty.reshape(flat.token_shape))
    lp, ent = function.apply(flat.hidden, flat.weight, flat.targets, flat.bias, flat.temperature, tc, vc)
    return LogprobEntropy(lp.reshape(flat.token_shape), ent.reshape(flat.token_shape))
