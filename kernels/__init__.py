"""arborl.kernels: memory-lean training maths, the bottom layer (imports nothing else of arborl).

- ``fused_logprob_entropy``: per-token log-prob + entropy from hidden states and the LM head,
  never materialising ``[tokens, vocab]`` logits (chunked torch on CPU, Triton on CUDA).
- ``register_sdpa_gqa``: transformers attention (``sdpa_gqa``) whose SDPA reads grouped
  key/value heads in place on CPU instead of repeating them under a mask.

The Triton backend (``arborl.kernels.logprob_triton``) is imported lazily, only when chosen.
"""

from .attention import register_sdpa_gqa
from .errors import (
    BackendUnavailableError,
    DeviceMismatchError,
    DTypeMismatchError,
    KernelInputError,
    ShapeMismatchError,
)
from .functional import Backend, LogprobEntropy, fused_logprob_entropy, resolve_backend
from .logprob import ChunkedLogprobEntropyFunction
from .reference import materialized_logprob_entropy

__all__ = [
    "Backend",
    "BackendUnavailableError",
    "ChunkedLogprobEntropyFunction",
    "DTypeMismatchError",
    "DeviceMismatchError",
    "KernelInputError",
    "LogprobEntropy",
    "ShapeMismatchError",
    "fused_logprob_entropy",
    "materialized_logprob_entropy",
    "register_sdpa_gqa",
    "resolve_backend",
]
