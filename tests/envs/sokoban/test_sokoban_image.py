"""arborl/Sokoban-v0 with obs_type image | both: the room drawn as a picture, in messages with
image parts (the Qwen2-VL template's format), within bounds; Gymnasium's own checker passes."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import arborl.envs  # noqa: F401 - registers the ids
from arborl.envs.images import (
    CorruptImage,
    ImageBounds,
    ImageBoundsError,
    decode_image,
    image_part,
    message_images,
)
from arborl.envs.spaces import to_messages
from arborl.tasks import get_suite
from arborl.tasks.sokoban.game import Board, push
from arborl.tasks.sokoban.picture import CELL_KINDS, VISUAL_BOARD_PROMPT, VISUAL_TEMPLATE, render_image


def reply(move: str) -> str:
    return f"<think>plan</think><action>{move.lower()}</action>"


@pytest.fixture
def task():
    return get_suite("sokoban-6x6").tasks()[0]


@pytest.mark.parametrize("env_id", ["arborl/Sokoban-v0", "arborl/SokobanChat-v0"])
@pytest.mark.parametrize("obs_type", ["image", "both"])
def test_gymnasiums_checker_passes(env_id, obs_type):
    env = gymnasium.make(env_id, obs_type=obs_type)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_image_mode_shows_the_room_with_verl_agents_visual_prompt(task):
    env = gymnasium.make("arborl/Sokoban-v0", obs_type="image")
    obs, _ = env.reset(options={"task": task})
    (msg,) = obs
    assert msg["role"] == "user"
    image, text = msg["content"]
    assert image["type"] == "image" and text == {"type": "text", "text": VISUAL_TEMPLATE}
    board = task.board()
    pixels = image["image"]
    assert pixels.dtype == np.uint8 and pixels.shape == (board.height * 16, board.width * 16, 3)
    assert env.observation_space.contains(obs)
    # after a move, exactly the cells whose symbol changed are drawn differently
    obs, *_ = env.step(reply(task.solution[0]))
    after = push(board, task.solution[0])
    changed = {
        (r, c)
        for r in range(board.height)
        for c in range(board.width)
        if board.symbol((r, c)) != after.symbol((r, c))
    }
    assert changed
    new = obs[0]["content"][0]["image"]
    for r in range(board.height):
        for c in range(board.width):
            cell = np.s_[r * 16 : (r + 1) * 16, c * 16 : (c + 1) * 16]
            assert np.array_equal(pixels[cell], new[cell]) == ((r, c) not in changed), (r, c)
    env.close()


def test_both_shows_the_image_and_the_text_prompt(task):
    text_env = gymnasium.make("arborl/Sokoban-v0")
    both_env = gymnasium.make("arborl/Sokoban-v0", obs_type="both")
    (text_msg,), _ = text_env.reset(options={"task": task})
    (both_msg,), _ = both_env.reset(options={"task": task})
    image, text = both_msg["content"]
    assert text["text"] == text_msg["content"] and image["type"] == "image"
    a, *_ = text_env.step(reply(task.solution[0]))
    b, *_ = both_env.step(reply(task.solution[0]))
    assert b[0]["content"][1]["text"] == a[0]["content"]


def test_the_chat_variant_shows_the_new_board_alone_after_the_first_turn(task):
    env = gymnasium.make("arborl/SokobanChat-v0", obs_type="image")
    env.reset(options={"task": task})
    obs, *_ = env.step(reply(task.solution[0]))
    assert obs[0]["content"][1]["text"] == VISUAL_BOARD_PROMPT
    assert len(message_images(obs)) == 1


def test_every_cell_kind_has_its_own_glyph():
    glyphs = {}
    for rows in (["#####", "#PXO#", "#####"], ["#####", "#S√X#", "#XO_#", "#####"]):
        board = Board.parse(rows)
        pixels = render_image(board)
        for r, row in enumerate(board.rows()):
            for c, symbol in enumerate(row):
                glyphs.setdefault(symbol, set()).add(
                    pixels[r * 16 : (r + 1) * 16, c * 16 : (c + 1) * 16].tobytes()
                )
    assert set(glyphs) == set(CELL_KINDS)
    assert all(len(drawn) == 1 for drawn in glyphs.values())  # one glyph per kind
    assert len({next(iter(d)) for d in glyphs.values()}) == len(CELL_KINDS)  # all different


def test_a_room_over_the_bound_is_shrunk_or_refused(task):
    env = gymnasium.make(
        "arborl/Sokoban-v0", obs_type="image", cell_px=64, image_bounds=ImageBounds(max_side=128)
    )
    obs, _ = env.reset(options={"task": task})
    assert max(obs[0]["content"][0]["image"].shape[:2]) == 128  # 6 cells * 64 px, shrunk
    assert env.observation_space.contains(obs)
    refuse = ImageBounds(max_side=128, oversize="refuse")
    env = gymnasium.make("arborl/Sokoban-v0", obs_type="image", cell_px=64, image_bounds=refuse)
    with pytest.raises(ImageBoundsError, match="max_side=128"):
        env.reset(options={"task": task})
    with pytest.raises(ValueError, match="obs_type"):
        gymnasium.make("arborl/Sokoban-v0", obs_type="pixels")


def test_image_parts_are_checked_and_kept_through_to_messages():
    with pytest.raises(ImageBoundsError, match=r"uint8 RGB"):
        image_part(np.zeros((4, 4, 3), dtype=np.float32))
    with pytest.raises(ImageBoundsError, match=r"uint8 RGB"):
        image_part(np.zeros((4, 4), dtype=np.uint8))
    part = image_part(np.zeros((4, 6, 3), dtype=np.uint8))
    (msg,) = to_messages([{"role": "user", "content": [part, {"type": "text", "text": "hi\udc80"}]}])
    assert msg["content"][0]["image"] is part["image"]
    assert msg["content"][1]["text"].startswith("hi") and msg["content"][1]["text"].encode("utf-8")


def test_a_corrupt_screenshot_is_an_infrastructure_error():
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((10, 20, 3), 7, dtype=np.uint8)).save(buf, format="PNG")
    good = buf.getvalue()
    assert decode_image(good).shape == (10, 20, 3)
    for bad in (b"", b"not an image", good[: len(good) // 2]):
        with pytest.raises(CorruptImage):
            decode_image(bad)


def test_a_picture_gives_its_room_back():
    from arborl.tasks.sokoban.picture import read_image

    for t in get_suite("sokoban-6x6").tasks():
        board = t.board()
        assert read_image(render_image(board)) == board.rows()
    pixels = render_image(board)
    pixels[3, 3] ^= 1  # one pixel off: not a glyph
    assert read_image(pixels) is None and read_image(pixels[:-1]) is None
