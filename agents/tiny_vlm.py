"""A tiny vision-language model built on this machine: Qwen2-VL's architecture, small.

There is no model hub here, so the image tests use a model built from transformers' own
classes, saved, and loaded back by path, as `agents.tiny` does for text: the same code takes a
real Qwen2-VL / Qwen2.5-VL checkpoint (`model.path=`) on a GPU host.

- Tokenizer: the tiny text model's (`agents.tiny`), with Qwen2-VL's vision tokens added as
  special tokens (``<|vision_start|>``, ``<|vision_end|>``, ``<|vision_pad|>``,
  ``<|image_pad|>``, ``<|video_pad|>``).
- Chat template: the tiny model's (ChatML, its tool format), with content rendered as
  Qwen2-VL's template renders it: a list of parts, an image part (``type == "image"``, or an
  ``image`` / ``image_url`` key) as ``<|vision_start|><|image_pad|><|vision_end|>`` (with
  ``add_vision_id``, "Picture n: " before it), a text part as its text.
- Processor: `Qwen2VLProcessor` (`Qwen2VLImageProcessorPil` here, without torchvision) with
  small patches: ``patch_size`` 4 and ``merge_size`` 2, so a 96x64 Sokoban room is 384 patches
  and 96 image tokens; ``max_pixels`` caps every image's tokens.
- Model: `Qwen2VLForConditionalGeneration`: a 1-block vision tower (embed 32) and the tiny text
  model's shape (hidden 64, head dim 32; M-RoPE sections 4+6+6 = head_dim / 2).

Builds are cached by a hash of the config, under a file lock, like the tiny text model.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from .tiny import CHAT_TEMPLATE, TinyModelConfig, default_cache_dir, ensure_tiny_model

BUILD_VERSION = 1
VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]

# Qwen2-VL's rendering of a message's content (its chat_template.json), as a macro the
# tiny template calls wherever it printed a message's text.
_CONTENT_MACRO = """\
{%- macro content_of(content, count) -%}
{%- if content is string -%}{{ content }}
{%- elif content is none -%}
{%- else -%}{%- for part in content -%}
{%- if part.type == 'image' or 'image' in part or 'image_url' in part -%}
{%- set count.image = count.image + 1 -%}
{%- if add_vision_id %}Picture {{ count.image }}: {% endif -%}<|vision_start|><|image_pad|><|vision_end|>
{%- elif part.type == 'video' or 'video' in part -%}
{%- set count.video = count.video + 1 -%}
{%- if add_vision_id %}Video {{ count.video }}: {% endif -%}<|vision_start|><|video_pad|><|vision_end|>
{%- elif 'text' in part -%}{{ part.text }}
{%- endif -%}{%- endfor -%}{%- endif -%}
{%- endmacro -%}
{%- set count = namespace(image=0, video=0) -%}
"""


def _vlm_template() -> str:
    out = _CONTENT_MACRO + CHAT_TEMPLATE
    for text, content in [
        ("{{ messages[0].content if messages[0].role == 'system' else 'You are a helpful assistant.' }}",
         "{{ content_of(messages[0].content, count) if messages[0].role == 'system' else 'You are a helpful assistant.' }}"),
        ("{{ messages[0].content }}<|im_end|>", "{{ content_of(messages[0].content, count) }}<|im_end|>"),
        ("{{ m.content }}\n</tool_response>", "{{ content_of(m.content, count) }}\n</tool_response>"),
        ("{{ m.content or '' }}", "{{ content_of(m.content, count) }}"),
        ("{{ m.role }}\n{{ m.content }}<|im_end|>", "{{ m.role }}\n{{ content_of(m.content, count) }}<|im_end|>"),
    ]:  # fmt: skip
        if text not in out:
            raise AssertionError(f"the tiny chat template changed: {text!r} is gone")
        out = out.replace(text, content)
    return out


VLM_CHAT_TEMPLATE = _vlm_template()


class TinyVLMConfig(BaseModel):
    """Size of the tiny vision-language model (change any field to get another build)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: TinyModelConfig = Field(default_factory=TinyModelConfig, description="the tokenizer and text model")
    vision_depth: int = Field(1, ge=1, description="vision transformer blocks")
    vision_embed_dim: int = Field(32, description="vision transformer width")
    vision_heads: int = 2
    patch_size: int = Field(4, description="pixels per patch side (Qwen2-VL: 14)")
    merge_size: int = Field(2, description="patches merged per side into one token (Qwen2-VL: 2)")
    temporal_patch_size: int = 2
    mrope_section: tuple[int, int, int] = Field((4, 6, 6), description="M-RoPE's t/h/w split of head_dim / 2")
    min_pixels: int = Field(8 * 8, description="images smaller than this are upscaled")
    max_pixels: int = Field(
        128 * 128, description="images larger than this are downscaled (caps image tokens)"
    )
    seed: int = 0

    def digest(self) -> str:
        payload = self.model_dump() | {
            "build": BUILD_VERSION,
            "template": VLM_CHAT_TEMPLATE,
            "text_digest": self.text.digest(),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def build_tiny_vlm(out_dir: Path, config: TinyVLMConfig | None = None) -> Path:
    """Build the processor and the model from the tiny text model's tokenizer; save to `out_dir`."""
    import torch
    from transformers import AutoTokenizer, Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from .vision import image_only_processor_class

    cfg = config or TinyVLMConfig()
    t = cfg.text
    tokenizer = AutoTokenizer.from_pretrained(ensure_tiny_model(config=t))
    tokenizer.add_tokens(VISION_TOKENS, special_tokens=True)
    tokenizer.chat_template = VLM_CHAT_TEMPLATE
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in VISION_TOKENS}
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=cfg.patch_size,
        temporal_patch_size=cfg.temporal_patch_size,
        merge_size=cfg.merge_size,
        min_pixels=cfg.min_pixels,
        max_pixels=cfg.max_pixels,
    )
    processor = image_only_processor_class()(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=VLM_CHAT_TEMPLATE
    )

    head_dim = t.hidden_size // t.num_attention_heads
    if sum(cfg.mrope_section) * 2 != head_dim:
        raise ValueError(f"mrope_section {cfg.mrope_section} must sum to head_dim / 2 = {head_dim // 2}")
    torch.manual_seed(cfg.seed)
    model_cfg = Qwen2VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": t.hidden_size,
            "intermediate_size": t.intermediate_size,
            "num_hidden_layers": t.num_hidden_layers,
            "num_attention_heads": t.num_attention_heads,
            "num_key_value_heads": t.num_key_value_heads,
            "max_position_embeddings": t.max_position_embeddings,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1e6,
                "mrope_section": list(cfg.mrope_section),
            },
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": None,
        },
        vision_config={
            "depth": cfg.vision_depth,
            "embed_dim": cfg.vision_embed_dim,
            "hidden_size": t.hidden_size,  # the merger projects patches into the text model's width
            "num_heads": cfg.vision_heads,
            "mlp_ratio": 2,
            "patch_size": cfg.patch_size,
            "spatial_merge_size": cfg.merge_size,
            "temporal_patch_size": cfg.temporal_patch_size,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    model = Qwen2VLForConditionalGeneration(model_cfg)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id

    tmp = out_dir.with_name(f"{out_dir.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    processor.save_pretrained(tmp)
    _declare_qwen2vl_processor(tmp, image_processor.to_dict())
    model.save_pretrained(tmp)
    (tmp / "arborl_tiny_vlm.json").write_text(cfg.model_dump_json(indent=2))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


def _declare_qwen2vl_processor(path: Path, image_config: dict) -> None:
    """Name the saved processor `Qwen2VLProcessor` (what a real checkpoint names), and write
    the video processor's config a real one has, so that a host with torchvision loads the
    directory with `AutoProcessor` as a real Qwen2-VL; here `load_processor` falls back."""
    config_path = path / "processor_config.json"
    config = json.loads(config_path.read_text())
    config["processor_class"] = "Qwen2VLProcessor"
    config_path.write_text(json.dumps(config, indent=2))
    keys = ("patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std", "size")
    video = {k: image_config[k] for k in keys if k in image_config}
    video |= {"video_processor_type": "Qwen2VLVideoProcessor", "processor_class": "Qwen2VLProcessor"}
    (path / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2))


def ensure_tiny_vlm(path: Path | None = None, config: TinyVLMConfig | None = None) -> Path:
    """The tiny VLM's directory, built on first use (cached by config hash, built once across
    processes that start together)."""
    cfg = config or TinyVLMConfig()
    out = path or default_cache_dir() / f"tiny-qwen2vl-{cfg.digest()}"
    if not (out / "config.json").exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out.parent / f".{out.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (out / "config.json").exists():
                build_tiny_vlm(out, cfg)
    return out
