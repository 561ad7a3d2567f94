"""Logit processing and teacher-forced scoring shared by the engines and their tests.

One implementation of the sampling distribution (`processed_logprobs`) is used both to
sample in the transformers engine and to rescore tokens afterwards, and it mirrors vLLM's
sampler (temperature, then top-k, then top-p; see `base` for the convention). Rows carry
their own parameters so requests with different settings share a batch::

    logits      [B, V]  raw next-token logits (float32)
    temperature [B]     0 = greedy row (scored at temperature 1, no filtering)
    top_k       [B]     0 = off
    top_p       [B]     1 = off
    ->          [B, V]  log-probs of the distribution each row samples from (-inf = filtered)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def filter_top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Set filtered-out entries of `logits` [B, V] to -inf (top-k, then top-p; vLLM's rule)."""
    vocab = logits.shape[-1]
    use_k = bool((top_k > 0).any())
    use_p = bool((top_p < 1.0).any())
    if not use_k and not use_p:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=False)
    if use_k:
        k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
        kth = sorted_logits.gather(1, (vocab - k).long().unsqueeze(1))
        sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, float("-inf"))
    if use_p:
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop = cum <= (1.0 - top_p.to(cum.dtype)).unsqueeze(1)
        drop[:, -1] = False  # the most likely token always survives
        drop &= (top_p < 1.0).unsqueeze(1)  # rows without top-p stay untouched
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(1, order, sorted_logits)


def processed_logits(
    logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
) -> torch.Tensor:
    """Logits of each row's sampling distribution: scaled by temperature and filtered.

    Greedy rows (temperature 0) come back unscaled and unfiltered.
    """
    greedy = temperature == 0
    temp = torch.where(greedy, torch.ones_like(temperature), temperature).to(logits.dtype)
    scaled = logits / temp.unsqueeze(1)
    k = torch.where(greedy, torch.zeros_like(top_k), top_k)
    p = torch.where(greedy, torch.ones_like(top_p), top_p)
    return filter_top_k_top_p(scaled, k, p)


def processed_logprobs(
    logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
) -> torch.Tensor:
    """``log_softmax(processed_logits(...))`` in the dtype of `logits`."""
    return processed_logits(logits, temperature, top_k, top_p).log_softmax(dim=-1)


def sample_rows(
    processed: torch.Tensor,
    greedy: torch.Tensor,
    generators: Sequence[torch.Generator | None],
) -> torch.Tensor:
    """One token per row of `processed` [B, V] logits (vLLM's exponential race).

    ``argmax(p / q)`` with ``q ~ Exp(1)`` draws from ``p``; each seeded row takes its noise
    from its own generator (one draw of V values per step), so a row's samples do not depend
    on its batch neighbours.
    """
    probs = processed.float().softmax(dim=-1)
    noise = torch.empty_like(probs).exponential_()
    for i, gen in enumerate(generators):
        if gen is not None:
            noise[i].exponential_(generator=gen)
    sampled = (probs / noise).argmax(dim=-1)
    return torch.where(greedy, processed.argmax(dim=-1), sampled)


@torch.no_grad()
def score_tokens(
    model: Any,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Teacher-forced log-probs [len(response_ids)] of `response_ids` after `prompt_ids`.

    Same convention as `Generation.logprobs` (temperature 0 scores at temperature 1). The
    log-softmax runs in `dtype`; the forward runs in the model's own dtype, so pass a
    float64 model for a float64 reference (`HFEngine.score` does).
    """
    if not response_ids:
        return torch.zeros(0, dtype=dtype)
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt_ids) + list(response_ids)], device=device)
    logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1]
    return response_logprobs(never_vision(model, logits), response_ids, temperature, top_k, top_p, dtype)


def never_vision(model: Any, logits: torch.Tensor) -> torch.Tensor:
    """`logits` [N, V] with a VLM's vision placeholder ids taken out, as the engine samples
    (`arborl.agents.vision.vision_token_ids`); unchanged for a text model."""
    from ..vision import vision_token_bias

    bias = vision_token_bias(model, logits.shape[-1], logits)
    return logits if bias is None else logits + bias


def response_logprobs(
    logits: torch.Tensor,
    response_ids: Sequence[int],
    temperature: float,
    top_k: int,
    top_p: float,
    dtype: torch.dtype,
) -> torch.Tensor:
    """The log-probs of `response_ids` under `logits` [len(response_ids), vocab] (the positions
    that predict them), after the sampling processors, in `dtype`; on the CPU."""
    logits = logits.to(dtype)
    n, device = logits.shape[0], logits.device
    lp = processed_logprobs(
        logits,
        torch.full((n,), float(temperature), dtype=dtype, device=device),
        torch.full((n,), int(top_k), dtype=torch.long, device=device),
        torch.full((n,), float(top_p), dtype=dtype, device=device),
    )
    target = torch.tensor(list(response_ids), device=device).unsqueeze(1)
    return lp.gather(1, target).squeeze(1).cpu()
