"""Sokoban as a picture: the room drawn as an RGB image, one glyph per cell, for a model that sees.

verl-agent's visual Sokoban shows its model gym-sokoban's `rgb_array` render (16x16 sprites
per cell) with `SOKOBAN_VISUAL_TEMPLATE`, the prompt that describes the sprites instead of the
text symbols. Here the glyphs are drawn with PIL (no sprite files) in the same spirit, each
kind of cell a different colour and shape, and `VISUAL_TEMPLATE` is verl-agent's visual
prompt with its description of the elements rewritten to describe these glyphs:

    wall              brick red with darker mortar lines
    floor             near-black
    target            a black tile outlined in red with a red diamond in the middle
    box               a yellow crate with an orange X across it
    box on target     the crate with a green X, on the red outline
    player            a green figure with two antennae and black eyes
    player on target  the figure over the target's red outline

`render_image(board)` is pure (the same board gives the same pixels) and cached per room.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .game import (
    BOX,
    BOX_ON_TARGET,
    FLOOR,
    PLAYER,
    PLAYER_ON_TARGET,
    TARGET,
    WALL,
    Board,
)

#: Pixels per cell side (gym-sokoban's sprites are 16x16): a 6x6 room is 96x96.
CELL_PX = 16

# RGB of each glyph's parts.
_BRICK, _MORTAR = (178, 74, 52), (110, 40, 30)
_FLOOR = (24, 24, 24)
_RED = (220, 30, 30)
_CRATE, _CRATE_EDGE, _ORANGE, _GREEN_X = (240, 200, 40), (160, 120, 20), (240, 120, 20), (40, 200, 60)
_ALIEN, _EYE = (60, 200, 80), (0, 0, 0)

VISUAL_TEMPLATE = """
You are an expert agent operating in the Sokoban environment. Your goal is to push all the boxes onto the target spots. Once all boxes are on targets, you win!

# Rules
- You can only push boxes. You can't pull them, so plan ahead to avoid getting stuck.
- You can't walk through or push boxes into walls.
- To avoid traps, do not push boxes into corners or against walls where they can't be moved again.

# Visual Elements Description:
- Character: A small, green alien-like figure with two antennae and black eyes. It represents you.
- Box: A yellow crate marked with an orange "X" across its front. It is the box you need to push. On a target its "X" turns green.
- Target: A black tile outlined in red, with a small red diamond shape in the center. It marks the destination where a box should be pushed.
- Wall: A red brick tile. Floor: a plain black tile.

# Current Step
Your current observation is shown in the image.
Your admissible actions are ["up", "down", "left", "right"].

Now its your turn to make a move (ONE action only for the current step).
You should first reason step-by-step about the current situation before deciding on a final action. This reasoning process MUST be enclosed within <think> </think> tags.\x20
After reasoning, you should choose the final action that you think is the best. The final action MUST be enclosed within <action> </action> tags.
"""

#: A later turn's words in a chat that keeps its turns (the rules stay from the first prompt).
VISUAL_BOARD_PROMPT = "Your current observation is shown in the image."


def render_image(board: Board, cell_px: int = CELL_PX) -> np.ndarray:
    """The room as uint8 [height * cell_px, width * cell_px, 3] (a fresh, writable array)."""
    return _image(board.rows(), cell_px).copy()


@lru_cache(maxsize=1024)
def _image(rows: tuple[str, ...], cell_px: int) -> np.ndarray:
    out = np.zeros((len(rows) * cell_px, len(rows[0]) * cell_px, 3), dtype=np.uint8)
    for r, row in enumerate(rows):
        for c, symbol in enumerate(row):
            out[r * cell_px : (r + 1) * cell_px, c * cell_px : (c + 1) * cell_px] = _glyph(symbol, cell_px)
    out.setflags(write=False)
    return out


@lru_cache(maxsize=64)
def _glyph(symbol: str, px: int) -> np.ndarray:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (px, px), _FLOOR)
    d = ImageDraw.Draw(img)
    edge = px - 1
    if symbol == WALL:
        d.rectangle([0, 0, edge, edge], fill=_BRICK)
        for y in range(0, px, max(4, px // 4)):  # courses of bricks, joints offset every other one
            d.line([0, y, edge, y], fill=_MORTAR)
            x0 = (px // 4) if (y // max(4, px // 4)) % 2 else px // 2
            d.line([x0, y, x0, min(edge, y + max(4, px // 4))], fill=_MORTAR)
    if symbol in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET):
        d.rectangle([0, 0, edge, edge], outline=_RED, width=max(1, px // 16))
    if symbol == TARGET:
        m, r = px / 2, px / 5
        d.polygon([(m, m - r), (m + r, m), (m, m + r), (m - r, m)], fill=_RED)
    if symbol in (BOX, BOX_ON_TARGET):
        inset = max(1, px // 8)
        d.rectangle([inset, inset, edge - inset, edge - inset], fill=_CRATE, outline=_CRATE_EDGE)
        x = _GREEN_X if symbol == BOX_ON_TARGET else _ORANGE
        w = max(1, px // 8)
        d.line([inset + 1, inset + 1, edge - inset - 1, edge - inset - 1], fill=x, width=w)
        d.line([inset + 1, edge - inset - 1, edge - inset - 1, inset + 1], fill=x, width=w)
    if symbol in (PLAYER, PLAYER_ON_TARGET):
        m = px / 2
        d.line([m - px / 6, px / 3, m - px / 4, px / 10], fill=_ALIEN, width=max(1, px // 16))  # antennae
        d.line([m + px / 6, px / 3, m + px / 4, px / 10], fill=_ALIEN, width=max(1, px // 16))
        d.ellipse([m - px / 3, px / 4, m + px / 3, px - px / 8], fill=_ALIEN)
        e = max(1.0, px / 12)
        for ex in (m - px / 7, m + px / 7):
            d.ellipse([ex - e, px / 2 - e, ex + e, px / 2 + e], fill=_EYE)
    return np.asarray(img, dtype=np.uint8)


#: Every cell kind drawn (each looks different, so a picture gives its room back).
CELL_KINDS = (WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET)


def read_image(pixels: np.ndarray, cell_px: int = CELL_PX) -> tuple[str, ...] | None:
    """The rows of the room a picture shows, the inverse of `render_image` (its glyphs, at
    `cell_px`, unscaled); None if any cell is not exactly one of them. What the scripted
    gold policy reads when the env shows only pictures."""
    height, width = pixels.shape[0] // cell_px, pixels.shape[1] // cell_px
    if pixels.ndim != 3 or (height * cell_px, width * cell_px) != pixels.shape[:2]:
        return None
    glyphs = {_glyph(kind, cell_px).tobytes(): kind for kind in CELL_KINDS}
    rows = []
    for r in range(height):
        row = ""
        for c in range(width):
            cell = pixels[r * cell_px : (r + 1) * cell_px, c * cell_px : (c + 1) * cell_px]
            kind = glyphs.get(np.ascontiguousarray(cell).tobytes())
            if kind is None:
                return None
            row += kind
        rows.append(row)
    return tuple(rows)
