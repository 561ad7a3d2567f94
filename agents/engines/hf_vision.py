"""The transformers engine's vision half: loading a vision-language model, prefilling a prompt
with its images, and scoring a response after one.

A prompt with images is prefilled on its own, in one forward pass over its ids, pixels and
image grids, with the 3-D (M-RoPE) positions the model derives from them
(`arborl.agents.vision.model_inputs`): never through the shared-prefix tree of text rows,
whose caches are keyed by ids alone (the same placeholder ids stand for any image). After
the prompt, a text token's position is its index plus the prompt's ``rope_delta`` (negative:
an image's tokens take fewer positions than tokens), so decoding passes
``position_ids = index + rope_delta`` per row, a 2-D position the text model spreads over the
three M-RoPE sections.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..vision import ImageInputs, has_vision, model_inputs
from .scoring import never_vision, response_logprobs

_Kv = list[tuple[torch.Tensor, torch.Tensor]]


def load_model(path: str, dtype: torch.dtype, attn_implementation: str) -> Any:
    """`from_pretrained(path)` through the auto class that fits: image-text-to-text for a
    model with a vision tower, causal LM otherwise."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    auto = (
        AutoModelForImageTextToText if has_vision(AutoConfig.from_pretrained(path)) else AutoModelForCausalLM
    )
    return auto.from_pretrained(path, dtype=dtype, attn_implementation=attn_implementation)


def text_config(model: Any) -> Any:
    """The config of the model's language part (a VLM nests it as `text_config`)."""
    return model.config.get_text_config()


def empty_cache(model: Any) -> Any:
    from transformers import DynamicCache

    return DynamicCache(config=text_config(model))


@torch.inference_mode()
def prefill_with_images(model: Any, ids: Sequence[int], images: ImageInputs) -> tuple[_Kv, torch.Tensor, int]:
    """KV per layer ``[1, heads, L, dim]``, next-token logits ``[V]`` and the rope delta of a
    prompt with images."""
    kwargs = model_inputs(model, ids, images)
    delta = kwargs.pop("rope_delta")
    cache = empty_cache(model)
    out = model(**kwargs, past_key_values=cache, logits_to_keep=1)
    return [(layer.keys, layer.values) for layer in cache.layers], out.logits[0, -1], delta


@torch.no_grad()
def score_with_images(
    model: Any,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    images: ImageInputs | None,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Teacher-forced log-probs of `response_ids` after `prompt_ids` and its images, in one
    forward pass over the whole sequence (what a learner computes); the convention of
    `scoring.score_tokens`."""
    if not response_ids:
        return torch.zeros(0, dtype=dtype)
    kwargs = model_inputs(model, list(prompt_ids) + list(response_ids), images)
    kwargs.pop("rope_delta")
    logits = model(**kwargs).logits[0, len(prompt_ids) - 1 : -1]
    return response_logprobs(never_vision(model, logits), response_ids, temperature, top_k, top_p, dtype)
