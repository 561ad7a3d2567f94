"""tool-cues-image (issue 52 §7's task, pixels alone): `arborl/Tool-v0` with ``obs_type`` and a
suite's ``pictures`` function. Each room's cue is drawn, never named; the picture is the cue of
the room the agent is in; gold 100 % and empty 0 %; the walker and the state are what they are
on tool-cues (how the world is shown does not change it); ``both`` keeps the words, ``text`` is
tool-cues itself; bad options fail at start naming the fix; Gymnasium's `check_env` passes;
the tiny VLM's processor and engine take a tool result's picture."""

from __future__ import annotations

import asyncio
import re

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import arborl.envs  # noqa: F401 - registers the arborl/* ids
from arborl.envs.episodes import run_episodes_sync
from arborl.envs.images import ImageBoundsError, is_image_part, message_images
from arborl.tasks import get_suite
from arborl.tasks.common import content_text
from arborl.tasks.toy import tool_cues as tc

SHAPE = re.compile(r"circle|triangle|square")
KWARGS = get_suite("tool-cues-image").env_kwargs


def _episodes(tasks, factory, **kwargs):
    envs = [gymnasium.make("arborl/Tool-v0", **kwargs) for _ in range(4)]
    by_id = {t.id: factory(t) for t in tasks}
    return run_episodes_sync(
        envs, lambda m, info: by_id[info["task_id"]](m, info), tasks, max_turns=tc.MAX_TURNS
    )


def _shown(episode):
    """(text, pictures) of every user and tool message of an episode."""
    out = []
    for m in episode.messages:
        if m["role"] not in ("user", "tool"):
            continue
        parts = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        text = "".join(p["text"] for p in parts if p.get("type") == "text")
        out.append((text, [np.asarray(p["image"]) for p in parts if is_image_part(p)]))
    return out


def test_every_cue_is_a_picture_of_the_room_and_never_a_word_gold_all_empty_none():
    suite = get_suite("tool-cues-image")
    tasks = suite.tasks()
    assert suite.env_id == "arborl/Tool-v0" and "vision" in suite.tags and len(tasks) == tc.EVAL_SIZE
    episodes = _episodes(tasks, tc.gold_policy, **KWARGS)
    assert [e.total_reward for e in episodes] == [1.0] * len(tasks)
    for task, ep in zip(tasks, episodes, strict=True):
        house, shown = task.metadata, _shown(ep)
        rooms = [(text, pics) for text, pics in shown if "painted on the wall" in text]
        assert len(rooms) == tc.ROOMS  # gold opens no locked door: one message per room with a cue
        for at, (text, pics) in enumerate(rooms):
            assert not SHAPE.search(text), text  # the words never say which shape
            assert f"room {house['rooms'][at]}:" in text and "a shape is painted on the wall" in text
            (pic,) = pics
            assert pic.dtype == np.uint8 and pic.shape == (tc.PICTURE_PX, tc.PICTURE_PX, 3)
            np.testing.assert_array_equal(pic, tc.draw_cue(house["cues"][at]))
        assert shown[-1][1] == [] and "the code is" in shown[-1][0]  # the last room has no cue
    assert [e.total_reward for e in _episodes(tasks, tc.empty_policy, **KWARGS)] == [0.0] * len(tasks)


def test_the_three_pictures_differ_in_shape_and_colour():
    pics = {s: tc.draw_cue(s) for s in tc.CUES}
    for a in tc.CUES:
        wall = np.all(pics[a] == 128, axis=-1)
        painted = pics[a][~wall]
        assert 0.15 < (~wall).mean() < 0.6  # a shape, not a blank or a full wall
        assert (painted == tc.PICTURE_COLOURS[a]).all()
        for b in tc.CUES:
            if a != b:
                assert (
                    np.all(pics[a] == 128, axis=-1) != np.all(pics[b] == 128, axis=-1)
                ).any()  # outlines differ
    # a triangle's apex is narrower than its base; a square's rows are all as wide
    rows = lambda s: (~np.all(pics[s] == 128, axis=-1)).sum(1)  # noqa: E731
    tri, sq = rows("triangle"), rows("square")
    assert tri[tri > 0][0] < tri[tri > 0][-1] and len(set(sq[sq > 0])) == 1
    with pytest.raises(ValueError, match="no picture of a 'hexagon'"):
        tc.draw_cue("hexagon")


def test_the_world_does_not_depend_on_how_it_is_shown():
    """The walker (its door picks seeded by the task and turn) plays every house alike on the
    image and the text env, with the same rewards; the state hash after each step is the same."""
    tasks = tc.load_suite()
    picture = _episodes(tasks, tc.explore_policy, **KWARGS)
    words = _episodes(tasks, tc.explore_policy)
    assert [e.total_reward for e in picture] == [e.total_reward for e in words]
    assert [len(e.messages) for e in picture] == [len(e.messages) for e in words]
    assert 0.1 < np.mean([e.total_reward for e in picture]) < 0.4  # about WALKER_SUCCESS (23 %)

    async def hashes(**kwargs):
        env = gymnasium.make("arborl/Tool-v0", **kwargs).unwrapped
        await env.areset(options={"task": tasks[1]})
        out = [await env.state_hash()]
        for colour in ("red", "blue", "green", *tasks[1].metadata["right"][:2]):
            await env.astep(
                f'<tool_call>\n{{"name": "door", "arguments": {{"colour": "{colour}"}}}}\n</tool_call>'
            )
            out.append(await env.state_hash())
        env.close()
        return out

    assert asyncio.run(hashes(**KWARGS)) == asyncio.run(hashes())


def test_both_keeps_the_words_and_text_is_tool_cues_itself():
    task = tc.load_suite()[0]
    cue = task.metadata["cues"][0]
    both = gymnasium.make("arborl/Tool-v0", **{**KWARGS, "obs_type": "both"})
    obs, _ = both.reset(options={"task": task})
    parts = obs[-1]["content"]
    assert is_image_part(parts[0]) and f"a {cue} is painted on the wall" in parts[1]["text"]
    text = gymnasium.make("arborl/Tool-v0", **{**KWARGS, "obs_type": "text"})
    plain = gymnasium.make("arborl/Tool-v0")
    assert text.reset(options={"task": task})[0] == plain.reset(options={"task": task})[0]
    for env in (both, text, plain):
        env.close()


def test_bad_options_fail_at_start_naming_the_fix():
    with pytest.raises(ValueError, match="needs pictures='module:function'"):
        gymnasium.make("arborl/Tool-v0", obs_type="image")
    with pytest.raises(ValueError, match="obs_type must be one of"):
        gymnasium.make("arborl/Tool-v0", obs_type="pixels", pictures=KWARGS["pictures"])
    with pytest.raises(Exception, match="nowhere"):
        gymnasium.make("arborl/Tool-v0", obs_type="image", pictures="arborl.tasks.toy.tool_cues:nowhere")
    small = gymnasium.make("arborl/Tool-v0", **KWARGS, image_bounds={"max_side": 16, "oversize": "refuse"})
    with pytest.raises(ImageBoundsError, match="max_side=16"):
        small.reset(options={"task": tc.load_suite()[0]})
    small.close()


def test_gymnasium_check_env_passes():
    env = gymnasium.make("arborl/Tool-v0", **KWARGS)
    check_env(env.unwrapped)
    env.close()


def test_the_tiny_vlm_takes_a_tool_results_picture(tiny_vlm):
    """After a right door, the next room's picture is in a tool message: the tiny VLM's template
    puts its placeholders inside the tool response, and the engine generates from it."""
    from arborl.agents.engines import HFEngineConfig, SamplingParams, make_engine
    from arborl.agents.vision import ImageInputs, load_processor

    task = tc.load_suite()[0]
    env = gymnasium.make("arborl/Tool-v0", **KWARGS)
    obs, _ = env.reset(options={"task": task})
    door = task.metadata["right"][0]
    reply = f'<tool_call>\n{{"name": "door", "arguments": {{"colour": "{door}"}}}}\n</tool_call>'
    after, *_ = env.step(reply)
    env.close()
    messages = [*obs, {"role": "assistant", "content": reply}, *after]
    assert after[0]["role"] == "tool" and is_image_part(after[0]["content"][0])
    processor = load_processor(tiny_vlm)
    inputs = processor.apply_chat_template(
        messages, tokenize=True, return_dict=True, add_generation_prompt=True, return_tensors="np"
    )
    text = processor.tokenizer.decode(inputs["input_ids"][0])
    response = text[text.index("<tool_response>") : text.index("</tool_response>")]
    assert "<|vision_start|>" in response and "a shape is painted on the wall" in response
    assert inputs["image_grid_thw"].shape[0] == 2  # the first room's picture and the second's
    engine = make_engine(HFEngineConfig(model=str(tiny_vlm)))
    images = ImageInputs(inputs["pixel_values"], inputs["image_grid_thw"])

    async def generate():
        try:
            return await engine.generate(
                [inputs["input_ids"][0].tolist()], SamplingParams(max_new_tokens=4, seed=0), images=[images]
            )
        finally:
            await engine.close()

    (gen,) = asyncio.run(generate())
    assert len(gen.token_ids) == 4 and all(np.isfinite(gen.logprobs))


def test_the_blank_control_shows_the_same_words_and_one_bare_wall():
    suite = get_suite("tool-cues-image-blank")
    tasks = suite.tasks()
    assert [t.id for t in tasks] == [t.id for t in get_suite("tool-cues-image").tasks()]  # the same houses
    gold = _episodes(tasks[:16], tc.gold_policy, **suite.env_kwargs)
    assert [e.total_reward for e in gold] == [1.0] * 16  # the env plays the same; only the view is bare
    cued = _episodes(tasks[:16], tc.gold_policy, **KWARGS)
    for blank_ep, cued_ep in zip(gold, cued, strict=True):
        blank, shown = _shown(blank_ep), _shown(cued_ep)
        assert [t for t, _ in blank] == [t for t, _ in shown]  # word for word
        pics = [p for _, ps in blank for p in ps]
        assert len(pics) == tc.ROOMS and all((p == 128).all() for p in pics)


def _call(colour: str) -> str:
    return f'<tool_call>\n{{"name": "door", "arguments": {{"colour": "{colour}"}}}}\n</tool_call>'


def _words_of(messages) -> list[str]:
    return [content_text(m["content"]) for m in messages]


def test_a_reply_cannot_crash_the_env_or_read_a_cue_through_the_pictures():
    """What a policy under RL would try: words of its own that look like a cue (an invalid
    argument the error echoes) must not become a picture; more pictures in one step than the
    bound (several doors in one reply) must neither raise nor fall back to the cue's words."""
    task = tc.load_suite()[0]
    right = task.metadata["right"]
    env = gymnasium.make("arborl/Tool-v0", **KWARGS).unwrapped
    env.reset(options={"task": task})
    fake = "a square is painted on the wall"
    obs, *_ = env.step(_call(fake))
    (msg,) = obs
    assert isinstance(msg["content"], str) and fake in msg["content"]  # its own words, echoed, not drawn
    # three right doors and a locked one in one reply: four results with a cue, a bound of two
    wrong = next(c for c in tc.COLOURS if c != right[3])
    obs, _, term, trunc, info = env.step("".join(_call(c) for c in (*right[:3], wrong)))
    assert not (term or trunc) and len(obs) == 4 and info["n_tool_errors"] == 0
    assert len(message_images(obs)) == env.image_bounds.max_images
    words = _words_of(obs)
    assert not any(SHAPE.search(w) for w in words), words  # no cue in words, shown or not
    assert [w.endswith("(picture not shown: too many in one step)") for w in words] == [
        True,
        True,
        False,
        False,
    ]
    (last,) = message_images([obs[-1]])  # the room the agent is in, still shown
    np.testing.assert_array_equal(last, tc.draw_cue(task.metadata["cues"][3]))
    # eight locked doors in one reply: the bound still holds, nothing raised
    obs, *_ = env.step(_call(wrong) * 8)
    assert len(message_images(obs)) == env.image_bounds.max_images
    assert not any(SHAPE.search(w) for w in _words_of(obs))
    env.close()
