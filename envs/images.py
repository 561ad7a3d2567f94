"""Images in chat observations: the part format, the bounds, and the observation space.

A message that shows images has a list of parts as its content, in the form the Qwen2-VL
chat template and transformers' processors take (``processor.apply_chat_template``)::

    {"role": "user", "content": [
        {"type": "image", "image": <uint8 [H, W, 3]>},
        {"type": "text", "text": "Your current observation is shown in the image."},
    ]}

The pixels are a numpy array, not a URL or base64: an env hands the agent what it rendered,
the agent hands it to the processor once, and Gymnasium's checks compare observations as
arrays. OpenAI's ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``
is a wire format (the gateway's): `decode_image` turns its bytes into this one.

Bounds (`ImageBounds`): every image is at most `max_side` pixels on its longer side (larger
ones are resized, keeping the aspect ratio, or refused with `ImageBoundsError`), and one
observation shows at most `max_images`. A screenshot that cannot be decoded is a
`CorruptImage`: an infrastructure error of the env, never the agent's 0.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field

from arborl.sandboxes import SandboxError

from .spaces import ROLES, SAMPLE_CHARSET, UnicodeText

#: What an env with pixels shows the model: the text alone, the image alone, or both.
ObsType = Literal["text", "image", "both"]
OBS_TYPES: tuple[str, ...] = ("text", "image", "both")


class ImageBoundsError(ValueError):
    """An image is over a bound (size or count) that says to refuse it."""


class CorruptImage(SandboxError):
    """A screenshot that failed or does not decode: the env's infrastructure failed (a
    `SandboxError` of fault "infra": the step ends the episode as ``sandbox_infra``, which
    evaluation retries and training leaves out), never the agent's 0."""

    fault = "infra"


class ImageBounds(BaseModel):
    """How large and how many images one observation may show."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_side: int = Field(1024, ge=8, description="longest side of an image, in pixels")
    max_images: int = Field(4, ge=1, description="images in one observation (one step's messages)")
    oversize: Literal["resize", "refuse"] = Field(
        "resize", description="an image over max_side: shrink it (aspect kept) or raise ImageBoundsError"
    )


def image_part(pixels: Any, bounds: ImageBounds | None = None) -> dict[str, Any]:
    """An image part holding `pixels` (uint8 [H, W, 3]) within `bounds`."""
    bounds = bounds or ImageBounds()
    arr = np.asarray(pixels)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3 or 0 in arr.shape:
        raise ImageBoundsError(
            f"an image part holds uint8 RGB pixels [H, W, 3]; got {arr.dtype} {list(arr.shape)}"
        )
    height, width = arr.shape[:2]
    if max(height, width) > bounds.max_side:
        if bounds.oversize == "refuse":
            raise ImageBoundsError(
                f"image {width}x{height} is over max_side={bounds.max_side}: render it smaller "
                "or set oversize='resize'"
            )
        arr = _shrink(arr, bounds.max_side)
    return {"type": "image", "image": np.ascontiguousarray(arr)}


def _shrink(arr: np.ndarray, max_side: int) -> np.ndarray:
    from PIL import Image

    height, width = arr.shape[:2]
    scale = max_side / max(height, width)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return np.asarray(Image.fromarray(arr).resize(size, Image.Resampling.BICUBIC), dtype=np.uint8)


def with_image(
    messages: Sequence[Mapping[str, Any]], pixels: Any, bounds: ImageBounds | None = None
) -> tuple[dict[str, Any], ...]:
    """`messages` with `pixels` shown first in the last message (the step's observation), its
    text after the image."""
    out = [dict(m) for m in messages]
    last = out[-1]
    content = last.get("content")
    parts = list(content) if isinstance(content, list | tuple) else [text_part(str(content or ""))]
    last["content"] = [image_part(pixels, bounds), *parts]
    return tuple(out)


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def is_image_part(part: Any) -> bool:
    """Whether a content part is an image (the Qwen2-VL template's own test)."""
    return isinstance(part, Mapping) and (
        part.get("type") == "image" or "image" in part or "image_url" in part
    )


def message_images(messages: Iterable[Mapping[str, Any]]) -> list[np.ndarray]:
    """The pixels of every image part of `messages`, in order."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list | tuple):
            out += [np.asarray(p["image"]) for p in content if is_image_part(p) and "image" in p]
    return out


def check_image_count(messages: Sequence[Mapping[str, Any]], bounds: ImageBounds) -> None:
    """Raise `ImageBoundsError` when `messages` show more than `bounds.max_images` images."""
    n = len(message_images(messages))
    if n > bounds.max_images:
        raise ImageBoundsError(f"{n} images in one observation; max_images={bounds.max_images}")


#: zlib level of stored PNGs: 1 is ~5x faster than the default and ~20 % larger on screens.
PNG_LEVEL = 1


def png_bytes(pixels: Any) -> bytes | None:
    """uint8 [H, W, 3 | 4] pixels as PNG bytes (lossless: `decode_image` of them gives the
    same RGB pixels back); None when they are not an image."""
    from PIL import Image

    array = np.asarray(pixels)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] not in (3, 4):
        return None
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG", compress_level=PNG_LEVEL)
    return buf.getvalue()


def decode_image(data: bytes, bounds: ImageBounds | None = None) -> np.ndarray:
    """PNG/JPEG/... bytes as uint8 [H, W, 3] within `bounds`; `CorruptImage` if they do not decode."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            arr = np.asarray(img.convert("RGB"), dtype=np.uint8)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise CorruptImage(f"image bytes do not decode ({len(data)} bytes): {type(e).__name__}: {e}") from e
    return image_part(arr, bounds)["image"]


class ContentSpace(spaces.Space[Any]):
    """A message's content: text, or a list of text and image parts within `bounds`.

    `sample()` gives text (what a random observation needs to be); `contains` admits any
    content an env with images returns.
    """

    def __init__(self, bounds: ImageBounds | None = None, seed: Any = None) -> None:
        super().__init__(None, None, seed)
        self.bounds = bounds or ImageBounds()
        self._text = UnicodeText()

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        n = int(self.np_random.integers(0, 32))
        return "".join(self.np_random.choice(list(SAMPLE_CHARSET), size=n))

    def contains(self, x: Any) -> bool:
        if isinstance(x, str):
            return self._text.contains(x)
        if not isinstance(x, list | tuple):
            return False
        images = 0
        for part in x:
            if not isinstance(part, Mapping):
                return False
            if part.get("type") == "text":
                if not self._text.contains(part.get("text")):
                    return False
            elif part.get("type") == "image":
                img = part.get("image")
                if not (isinstance(img, np.ndarray) and img.dtype == np.uint8 and img.ndim == 3):
                    return False
                if img.shape[2] != 3 or max(img.shape[:2]) > self.bounds.max_side:
                    return False
                images += 1
            else:
                return False
        return images <= self.bounds.max_images

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"ContentSpace(max_side={self.bounds.max_side}, max_images={self.bounds.max_images})"

    def __eq__(self, other: object, /) -> bool:
        return isinstance(other, ContentSpace) and self.bounds == other.bounds

    __hash__ = None  # type: ignore[assignment]  # mutable RNG inside, like every Space


def multimodal_observation_space(bounds: ImageBounds | None = None) -> spaces.Sequence:
    """A tuple of chat messages whose contents may hold image parts (`ContentSpace`)."""
    import string

    message = spaces.Dict(
        {
            "role": spaces.Text(min_length=1, max_length=16, charset=string.ascii_lowercase + "_"),
            "content": ContentSpace(bounds),
        }
    )
    return spaces.Sequence(message, stack=False)


__all__ = [
    "OBS_TYPES",
    "PNG_LEVEL",
    "ROLES",
    "ContentSpace",
    "CorruptImage",
    "ImageBounds",
    "ImageBoundsError",
    "ObsType",
    "check_image_count",
    "decode_image",
    "image_part",
    "is_image_part",
    "message_images",
    "multimodal_observation_space",
    "png_bytes",
    "text_part",
    "with_image",
]
