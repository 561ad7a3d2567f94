"""The policy a run trains, text or vision-language, as the run context loads it.

A model with a vision tower (Qwen2-VL, Qwen2.5-VL; `model.tiny_vlm` builds a tiny one) is
loaded through transformers' image-text-to-text auto class and read through its processor,
which the agents take in the tokenizer's place (`arborl.agents.vision`). Its batches carry
the turns' pixels and the model's M-RoPE positions (`arborl.trainer.dataproto`), for which
the run keeps `rope_index`; `model.freeze_vision` freezes its tower before the learner's
optimiser is built, so the optimiser never holds it::

    model.path / model.tiny_vlm ──▶ base dir ──load_policy──▶ model ──prepare_vision──▶ rope_index
                                            └─load_policy_tokenizer──▶ processor | tokenizer
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from arborl.agents.engines.hf_vision import load_model
from arborl.agents.tiny import ensure_tiny_model
from arborl.agents.tiny_vlm import TinyVLMConfig, ensure_tiny_vlm
from arborl.agents.vision import has_vision, is_processor, rope_positions, vision_tower
from arborl.trainer.dataproto import RopeIndex

from .config import ModelConfig


def tiny_model_dir(cfg: ModelConfig) -> str:
    """The tiny model's directory (built on first use): the VLM with `tiny_vlm`, whose text
    half is `cfg.tiny`, else the text model."""
    if cfg.tiny_vlm:
        return str(ensure_tiny_vlm(config=TinyVLMConfig(text=cfg.tiny)))
    return str(ensure_tiny_model(config=cfg.tiny))


def load_policy(weights: str, dtype: torch.dtype, attn_implementation: str) -> Any:
    """`from_pretrained(weights)`: image-text-to-text for a model with a vision tower, causal
    LM otherwise (the engine loads through the same function)."""
    return load_model(weights, dtype, attn_implementation)


def prepare_vision(model: Any, freeze: bool) -> RopeIndex | None:
    """For a vision-language `model`: freeze its tower when `freeze` (no gradients, so no
    optimiser state) and return its positions for batches with images; None for a text model."""
    if not has_vision(model):
        return None
    if freeze:
        tower = vision_tower(model)
        if tower is None:
            raise ValueError(
                f"model.freeze_vision: cannot find the vision tower of {type(model).__name__} (no "
                "`model.visual`); set model.freeze_vision=false to train it with the rest"
            )
        tower.requires_grad_(False)
    return functools.partial(rope_positions, model)


def pad_token_id(tokenizer: Any) -> int:
    """The pad id of a tokenizer or of a processor's tokenizer."""
    return int((tokenizer.tokenizer if is_processor(tokenizer) else tokenizer).pad_token_id)
