"""Materialised reference: the ``[N, V]`` logits built in full, as an ordinary model head does.

Used by the tests (in float64) as ground truth and by ``bench/bench_kernels.py`` as the
baseline the fused kernels are measured against. Do not use it in training: its peak memory
is several ``N × V`` tensors.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._checks import check_logprob_inputs, compute_dtype


def materialized_logprob_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``log_softmax(h W^T / T)`` gathered at the targets, and the entropy of the full softmax.

    Shapes::

        hidden [..., d], weight [V, d], targets [...], bias [V] | None
        -> logprobs [...], entropy [...]   (float32, or float64 for float64 inputs)
    """
    flat = check_logprob_inputs(hidden, weight, targets, bias, temperature)
    cdt = compute_dtype(hidden.dtype)
    # Nested calls so that the raw logits die as soon as log_softmax has read them: the
    # baseline should be a fair, reasonably lean materialised implementation.
    logp_all = torch.log_softmax(
        F.linear(flat.hidden, flat.weight, flat.bias).to(cdt) / flat.temperature, dim=-1
    )
    logprobs = logp_all.gather(-1, flat.targets.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logprobs.reshape(flat.token_shape), entropy.reshape(flat.token_shape)
