"""OpenAI image content parts in, the chat template's image parts out.

A harness sends an image as OpenAI's ``{"type": "image_url", "image_url": {"url":
"data:image/png;base64,..."}}``. The gateway decodes it once (within `ImageBounds`: a larger
image is shrunk) into the part the model's processor and chat template take, ``{"type":
"image", "image": uint8 [H, W, 3]}`` (`arborl.envs.images`); the processor's pixels are then
recorded with the call (`episodes.Call.images`). Only ``data:`` URLs: the gateway fetches
nothing. An image that does not decode is the request's fault: a 400 naming the part.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from arborl.envs.images import CorruptImage, ImageBounds, ImageBoundsError, decode_image

from .errors import BadRequest


def has_images(content: Any) -> bool:
    return isinstance(content, list) and any(isinstance(p, dict) and p.get("type") != "text" for p in content)


def image_parts(content: list[Any], where: str, bounds: ImageBounds | None = None) -> list[dict[str, Any]]:
    """`content`'s text and image_url parts as the template's text and image parts."""
    out: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind == "text":
            out.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "image_url":
            out.append({"type": "image", "image": _pixels(part.get("image_url"), at, bounds)})
        else:
            raise BadRequest(f"{at}: content parts are text or image_url, got {kind!r}", param=where)
    return out


def _pixels(image_url: Any, at: str, bounds: ImageBounds | None) -> Any:
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str) or not url.startswith("data:"):
        raise BadRequest(
            f"{at}: image_url must be a data: URL (base64); the gateway fetches nothing", param=at
        )
    header, _, data = url.partition(",")
    if not header.endswith(";base64"):
        raise BadRequest(f"{at}: image_url must be base64 (data:image/png;base64,...)", param=at)
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{at}: the image_url's base64 does not decode", param=at) from None
    try:
        return decode_image(raw, bounds)
    except (CorruptImage, ImageBoundsError) as e:
        raise BadRequest(f"{at}: {e}", param=at) from None
