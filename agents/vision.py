"""What a vision-language policy's processor made of a turn's images, kept as it was made.

A multimodal turn is token ids *and* the tensors the vision tower reads. Both come from the
model's processor once, when the observation is appended (`arborl.agents.chat`), and are
stored with the turn: nothing is re-rendered or re-tokenised for the learner, whose forward
pass sees the engine's exact inputs::

    observation messages ──chat template──▶ text with <|vision_start|><|image_pad|><|vision_end|>
                         ──processor──────▶ ids (each <|image_pad|> expanded to the image's tokens)
                                            + ImageInputs(pixel_values [patches, C*T*P*P],
                                                          image_grid_thw [images, 3])

`ImageInputs` is the processor's output for Qwen2-VL-style models (Qwen2-VL, Qwen2.5-VL): the
patches and, per image, its (temporal, height, width) patch grid; an image takes
``t*h*w / merge_size**2`` placeholder tokens. `model_inputs` lays a whole sequence's images
out for one forward pass (the engine's prefill, the learner's log-probs).

`load_processor(path)` is `AutoProcessor.from_pretrained(path)`; where transformers cannot
build Qwen2-VL's video processor (it needs torchvision, which this CPU venv lacks) it loads the
same processor without one (`ImageOnlyQwen2VLProcessor`: images only, the same image
processor and tokenizer, read by the same `from_pretrained` code).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from arborl.envs.images import message_images


class VisionError(ValueError):
    """A policy cannot take the images it is given; the message names the fix."""


@dataclass(frozen=True, eq=False)
class ImageInputs:
    """The processor's tensors for the images of one span of tokens, in order, and the
    pictures they were made from."""

    #: float32 [patches, channels * temporal_patch * patch * patch]
    pixel_values: np.ndarray
    #: int64 [images, 3]: each image's (t, h, w) grid of patches
    image_grid_thw: np.ndarray
    #: Each image as the processor read it, uint8 [H, W, 3], in order; () where unknown
    #: (trajectories stored before v8). The tensors are what a forward pass reads; the pictures
    #: are what a server that runs its own processor takes (verl's `image_data` and
    #: `multi_modal_data["images"]`, vLLM's, an OpenAI image part), which the tensors cannot
    #: be turned back into.
    pictures: tuple[np.ndarray, ...] = ()

    @property
    def num_images(self) -> int:
        return int(self.image_grid_thw.shape[0])

    @property
    def has_pictures(self) -> bool:
        return len(self.pictures) == self.num_images

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ImageInputs)
            and np.array_equal(self.pixel_values, other.pixel_values)
            and np.array_equal(self.image_grid_thw, other.image_grid_thw)
        )

    @staticmethod
    def concat(parts: Sequence[ImageInputs | None]) -> ImageInputs | None:
        """The images of consecutive spans as one (None when none has images); the pictures
        are kept only where every span has its own."""
        kept = [p for p in parts if p is not None and p.num_images]
        if not kept:
            return None
        if len(kept) == 1:
            return kept[0]
        pictures = tuple(x for p in kept for x in p.pictures) if all(p.has_pictures for p in kept) else ()
        return ImageInputs(
            np.concatenate([p.pixel_values for p in kept]),
            np.concatenate([p.image_grid_thw for p in kept]),
            pictures,
        )

    def split(self, n: int) -> tuple[ImageInputs | None, ImageInputs | None]:
        """The first `n` images and the rest (None where there are none)."""
        patches = int(self.image_grid_thw[:n].prod(axis=1).sum())
        pics = self.pictures if self.has_pictures else ()
        head = ImageInputs(self.pixel_values[:patches], self.image_grid_thw[:n], pics[:n]) if n > 0 else None
        rest = (
            ImageInputs(self.pixel_values[patches:], self.image_grid_thw[n:], pics[n:])
            if n < self.num_images
            else None
        )
        return head, rest

    def to_row(self) -> dict[str, Any]:
        """The Parquet form: flat values and shapes (float32 kept bit for bit), the pictures as
        PNG (lossless)."""
        from arborl.envs.images import png_bytes

        return {
            "pixel_values": self.pixel_values.astype(np.float32, copy=False).ravel(),
            "pixel_shape": list(self.pixel_values.shape),
            "image_grid_thw": self.image_grid_thw.astype(np.int64, copy=False).ravel(),
            "pictures": [png_bytes(p) for p in self.pictures] if self.has_pictures else [],
        }

    @staticmethod
    def from_row(row: Mapping[str, Any] | None) -> ImageInputs | None:
        if not row:
            return None
        shape = tuple(int(x) for x in row["pixel_shape"])
        return ImageInputs(
            np.asarray(row["pixel_values"], dtype=np.float32).reshape(shape),
            np.asarray(row["image_grid_thw"], dtype=np.int64).reshape(-1, 3),
            tuple(_png_pixels(b) for b in row.get("pictures") or ()),
        )

    def pil_images(self, context: str) -> list[Any]:
        """The pictures as PIL images (what verl and vLLM take as image data); `VisionError`
        naming `context` when they were not kept."""
        from PIL import Image

        if not self.has_pictures:
            raise VisionError(
                f"{context}: {self.num_images} images whose pictures were not kept (a trajectory "
                "stored before format v8, or made by hand without ImageInputs.pictures)"
            )
        return [Image.fromarray(p) for p in self.pictures]


def _png_pixels(data: bytes) -> np.ndarray:
    """A stored picture's pixels as they were (no env bounds applied: they were, when shown)."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        array = np.asarray(img.convert("RGB"), dtype=np.uint8)
    array.flags.writeable = False
    return array


def load_processor(path: str | Any) -> Any:
    """The model's processor, by the real `from_pretrained(path)` code (see the module doc)."""
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(path)
    except (OSError, ImportError, TypeError) as e:
        if "video" not in str(e).lower():
            raise
        return image_only_processor_class().from_pretrained(path)
    if not is_processor(processor):
        # a directory saved with the image-only processor (a training run's checkpoint) names a
        # class AutoProcessor does not know, and it falls back to the bare tokenizer
        return image_only_processor_class().from_pretrained(path)
    return processor


def image_only_processor_class() -> type:
    """`Qwen2VLProcessor` without its video processor (which needs torchvision)."""
    from transformers import Qwen2VLProcessor
    from transformers.processing_utils import ProcessorMixin

    class ImageOnlyQwen2VLProcessor(Qwen2VLProcessor):
        def __init__(
            self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None, **kw: Any
        ):
            self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
            self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    return ImageOnlyQwen2VLProcessor


def load_policy_tokenizer(path: str | Any) -> Any:
    """What an agent or the gateway takes for the model at `path`: its processor when it has a
    vision tower (images then go through it), else its tokenizer."""
    from transformers import AutoConfig, AutoTokenizer

    from .engines.adapters import base_model_of

    # a LoRA adapter's directory holds the tokenizer, and its base the config
    if has_vision(AutoConfig.from_pretrained(base_model_of(path) if isinstance(path, str) else path)):
        return load_processor(path)
    return AutoTokenizer.from_pretrained(path)


def is_processor(obj: Any) -> bool:
    """Whether `obj` is a multimodal processor (has an image processor), not a tokenizer."""
    return getattr(obj, "image_processor", None) is not None and getattr(obj, "tokenizer", None) is not None


class ImageEncoder:
    """Token ids and `ImageInputs` of rendered chat text, through the model's processor."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.image_token: str = processor.image_token
        if not getattr(
            self.tokenizer, "chat_template", None
        ):  # the template may live with the processor only
            self.tokenizer.chat_template = processor.chat_template

    def encode(
        self, text: str, messages: Sequence[Mapping[str, Any]]
    ) -> tuple[list[int], ImageInputs | None]:
        """`text` (the template's rendering of `messages`, or of a part of them) as ids, each
        image placeholder expanded, with the images of `messages` processed once."""
        images = message_images(messages)
        shown = text.count(self.image_token)
        if shown != len(images):
            raise VisionError(
                f"the chat template rendered {shown} image placeholders for {len(images)} images: "
                "it does not render image parts (use the model's own processor chat template)"
            )
        if not images:
            return (list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []), None
        out = self.processor(text=[text], images=images, return_tensors="np", add_special_tokens=False)
        ids = [int(t) for t in out["input_ids"][0]]
        return ids, ImageInputs(
            np.asarray(out["pixel_values"], dtype=np.float32),
            np.asarray(out["image_grid_thw"], dtype=np.int64),
            pictures(images),
        )


def expand_placeholders(
    encoder: ImageEncoder, text: str, messages: Sequence[Mapping[str, Any]]
) -> tuple[str, ImageInputs | None]:
    """`text` with each image placeholder repeated as many times as its image has tokens (what
    the processor does before it tokenises), and the images processed; text whose ids are
    then the plain encoding of it (a prefix of it can be matched against decoded ids)."""
    images = message_images(messages)
    if not images:
        return text, None
    out = encoder.processor.image_processor(images=images, return_tensors="np")
    grid = np.asarray(out["image_grid_thw"], dtype=np.int64)
    merge = int(encoder.processor.image_processor.merge_size) ** 2
    pieces = text.split(encoder.image_token)
    if len(pieces) != len(images) + 1:
        raise VisionError(
            f"the chat template rendered {len(pieces) - 1} image placeholders for {len(images)} images"
        )
    expanded = pieces[0] + "".join(
        encoder.image_token * int(g.prod() // merge) + rest for g, rest in zip(grid, pieces[1:], strict=True)
    )
    return expanded, ImageInputs(np.asarray(out["pixel_values"], dtype=np.float32), grid, pictures(images))


def pictures(images: Sequence[Any]) -> tuple[np.ndarray, ...]:
    """`images` (message_images' arrays) as `ImageInputs.pictures`: uint8 RGB, read-only copies
    (an env may reuse its buffer for the next frame)."""
    out = []
    for image in images:
        array = np.array(image, dtype=np.uint8, copy=True)
        array.flags.writeable = False
        out.append(array)
    return tuple(out)


def model_inputs(model: Any, ids: Sequence[int], images: ImageInputs | None) -> dict[str, Any]:
    """Keyword arguments of one forward pass over `ids` [1, L] with their images: the
    pixels, the grids, the token types and the 3-D (M-RoPE) positions the model derives from
    them (`get_rope_index`); plus ``rope_delta``, what a text token's position after `ids`
    is offset by (``L + rope_delta`` for the next token). Text only: plain ids."""
    import torch

    device = next(model.parameters()).device
    input_ids = torch.tensor([list(ids)], device=device)
    if images is None:
        return {"input_ids": input_ids, "rope_delta": 0}
    cfg = model.config
    types = (input_ids == cfg.image_token_id).to(torch.int32)
    grid = torch.as_tensor(images.image_grid_thw, device=device)
    positions, delta = model.model.get_rope_index(input_ids, mm_token_type_ids=types, image_grid_thw=grid)
    dtype = next(model.parameters()).dtype
    return {
        "input_ids": input_ids,
        "pixel_values": torch.as_tensor(images.pixel_values, device=device).to(dtype),
        "image_grid_thw": grid,
        "mm_token_type_ids": types,
        "position_ids": positions,
        "rope_delta": int(delta.reshape(-1)[0]),
    }


def rope_positions(model: Any, ids: Sequence[int], images: ImageInputs | None) -> Any:
    """The positions the model gives `ids` with their images: int64 ``[3, L]`` on the CPU, the
    (temporal, height, width) rows of M-RoPE (`model_inputs`' ``position_ids``); text alone
    (`images` None) has ``0..L-1`` in each row, what the model spreads a 1-D position over."""
    import torch

    if images is None:
        return torch.arange(len(ids)).expand(3, -1).clone()
    return model_inputs(model, ids, images)["position_ids"][:, 0].cpu()


def vision_tower(model: Any) -> Any:
    """The model's vision encoder (with its merger into the text model's width), or None:
    what `freeze_vision` freezes (verl's ``freeze_vision_tower`` freezes the same module)."""
    tower = getattr(getattr(model, "model", None), "visual", None)
    return tower if tower is not None else getattr(model, "visual", None)


def check_sees_images(
    messages: Sequence[Mapping[str, Any]], vision: ImageEncoder | None, engine: Any
) -> None:
    """Raise `VisionError`, naming the fix, when `messages` show images a policy cannot take."""
    if not message_images(messages):
        return
    if vision is None:
        raise VisionError(
            "the observation shows images but the policy reads text only (no vision tower, a text "
            "tokenizer): use a vision-language model (model.path= a Qwen2-VL / Qwen2.5-VL checkpoint; "
            "arborl.agents.tiny_vlm in tests) and pass its processor (arborl.agents.vision.load_processor) "
            "where the tokenizer goes, or set the env's obs_type='text'"
        )
    if not getattr(engine, "accepts_images", False):
        raise VisionError(
            f"the {getattr(engine, 'kind', '') or type(engine).__name__} engine does not take images "
            "with this model: use model.engine=transformers with a vision-language model"
        )


def has_vision(model_or_config: Any) -> bool:
    """Whether a model (or its config) has a vision tower."""
    cfg = getattr(model_or_config, "config", model_or_config)
    return getattr(cfg, "vision_config", None) is not None


#: The config keys of a VLM's vision placeholder tokens (Qwen2-VL, Qwen2.5-VL, Qwen3-VL).
VISION_TOKEN_KEYS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
#: The logit bias that takes a token out of the distribution. exp() of it underflows to exactly
#: 0 in float32 whatever the other logits are, as -inf would, but it stays finite (in float16
#: and bfloat16 too), so the learner's entropy has no 0 · log 0 = nan term.
NEVER_LOGIT = -1e4


def vision_token_ids(model_or_config: Any) -> list[int]:
    """The ids a VLM must never sample: its image / video placeholders and their delimiters.
    A sampled one is taken for a picture by every later forward (the next turn's prefill, the
    learner's), which then has more placeholders than pictures and fails (transformers'
    get_rope_index raises StopIteration; "image features and image tokens do not match" in
    verl and vLLM users' reports). Empty for a text model."""
    cfg = getattr(model_or_config, "config", model_or_config)
    if not has_vision(cfg):
        return []
    return sorted({int(v) for k in VISION_TOKEN_KEYS if (v := getattr(cfg, k, None)) is not None})


def vision_token_bias(model: Any, vocab: int, like: Any) -> Any:
    """A ``[vocab]`` logit bias (dtype and device of `like`) that is NEVER_LOGIT at the model's
    `vision_token_ids` and 0 elsewhere, or None for a text model. The engine adds it to the
    logits it samples and scores with, the learner to its head's: both then use the same
    distribution, so behaviour and learner log-probs still agree."""
    import torch

    ids = [i for i in vision_token_ids(model) if i < vocab]
    if not ids:
        return None
    bias = torch.zeros(vocab, dtype=like.dtype, device=like.device)
    bias[ids] = NEVER_LOGIT
    return bias


__all__ = [
    "NEVER_LOGIT",
    "ImageEncoder",
    "ImageInputs",
    "VisionError",
    "check_sees_images",
    "expand_placeholders",
    "has_vision",
    "image_only_processor_class",
    "is_processor",
    "load_policy_tokenizer",
    "load_processor",
    "model_inputs",
    "rope_positions",
    "vision_token_bias",
    "vision_token_ids",
    "vision_tower",
]
