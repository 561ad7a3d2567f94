"""The screenshots an episode's observations carry, kept for the run directory.

    env = RecordScreens(env)          # for one attempt: the worker's env is not changed
    rec = await driver.run(env, ...)
    env.pngs                          # {0: PNG after reset, 1: after step 1, ...}

Envs that see pixels (the desktop env, the web env with ``screenshot=True``) return
``{"messages": [...], "screenshot": uint8 [H, W, 3]}``; a policy reads the messages and the
pixels are gone after the step. This wrapper encodes each screenshot as a PNG when it passes,
so `outputs.write_outputs` can store ``screens/turn-NNN.png`` next to the transcript and
``arborl view`` can show them beside the turns. Text envs pass through untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np

from arborl.envs.images import png_bytes
from arborl.envs.wrappers import AsyncWrapper, StepResult


def screenshot_png(obs: Any) -> bytes | None:
    """The observation's screenshot as PNG bytes; None when it carries none (a text env)."""
    pixels = obs.get("screenshot") if isinstance(obs, Mapping) else None
    return None if pixels is None else png_bytes(pixels)


def transcript_images(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, bytes]]:
    """The transcript with each image part the model was shown replaced by a reference to its
    file, and those files: ``screens/turn-NNN.png`` for a turn's first picture (turn 0: the
    prompt's, turn k: the observation after the k-th reply), ``turn-NNN-J.png`` for its J-th
    after that. These are the pixels as the model got them (after the env's size bounds),
    so they take the place of `RecordScreens`' copy of the same turn."""
    out: list[dict[str, Any]] = []
    files: dict[str, bytes] = {}
    turn = seen = 0
    for message in messages:
        if message.get("role") == "assistant":
            turn, seen = turn + 1, 0
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        parts: list[Any] = []
        for part in content:
            png = (
                png_bytes(part.get("image"))
                if isinstance(part, Mapping) and part.get("type") == "image"
                else None
            )
            if png is None:
                parts.append(part)
                continue
            name = f"screens/turn-{turn:03d}{f'-{seen}' if seen else ''}.png"
            seen += 1
            files[name] = png
            height, width = np.asarray(part["image"]).shape[:2]
            parts.append({"type": "image", "file": name, "width": int(width), "height": int(height)})
        out.append({**message, "content": parts})
    return out, files


class RecordScreens(AsyncWrapper):
    """Keep each observation's screenshot as PNG bytes in `pngs`, keyed by turn (0: reset)."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self.pngs: dict[int, bytes] = {}
        self._turn = 0

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict]:
        obs, info = await super().areset(seed=seed, options=options)
        self.pngs, self._turn = {}, 0
        self._keep(obs)
        return obs, info

    async def astep(self, action: Any) -> StepResult:
        result = await super().astep(action)
        self._turn += 1
        self._keep(result[0])
        return result

    def _keep(self, obs: Any) -> None:
        png = screenshot_png(obs)
        if png is not None:
            self.pngs[self._turn] = png
