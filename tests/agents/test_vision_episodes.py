"""Token-exact multimodal turns with the tiny VLM (issue 52 §3-4): the transformers engine
generates from images as transformers' own `generate` does; an agent's episode on Sokoban's
picture stores the processor's ids and pixels with each turn; a learner's one forward pass
over the stored trajectory gives the engine's log-probs; Parquet carries the images (since v8
their pictures too) and still reads v6 files; a text-only policy given images fails at start,
naming the fix."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, Qwen2VLForConditionalGeneration

import arborl.envs  # noqa: F401 - registers the ids
from arborl.agents import Agent, AgentConfig
from arborl.agents.engines import HFEngineConfig, SamplingParams, make_engine
from arborl.agents.engines.hf_vision import score_with_images
from arborl.agents.trajectory import SCHEMA_VERSION, Trajectory, Turn, read_trajectories, write_trajectories
from arborl.agents.vision import ImageEncoder, ImageInputs, VisionError, load_processor, model_inputs
from arborl.envs.images import message_images
from arborl.tasks import get_suite

V6_FILE = Path(__file__).parent / "data" / "trajectories-v6.parquet"  # written by the v6 code


def learner_logprobs(vlm, traj) -> np.ndarray:
    """What a learner computes: one float64 forward over the stored ids and pixels, the log-prob
    of each next token, the vision placeholders out of the distribution as the engine samples
    (their ids from the model's config)."""
    with torch.no_grad():
        kwargs = model_inputs(vlm, traj.token_ids().tolist(), traj.images())
        kwargs.pop("rope_delta")
        logits = vlm(**kwargs).logits[0, :-1].double()
    c = vlm.config
    logits[
        :, [c.image_token_id, c.video_token_id, c.vision_start_token_id, c.vision_end_token_id]
    ] = -torch.inf
    ids = torch.as_tensor(traj.token_ids())
    return logits.log_softmax(-1).gather(1, ids[1:].unsqueeze(1)).squeeze(1).numpy()


@pytest.fixture(scope="module")
def processor(tiny_vlm):
    return load_processor(tiny_vlm)


@pytest.fixture(scope="module")
def vlm(tiny_vlm):
    return Qwen2VLForConditionalGeneration.from_pretrained(tiny_vlm).eval()


@pytest.fixture(scope="module")
def task():
    return get_suite("sokoban-6x6").tasks()[0]


def opening(task, obs_type="image"):
    env = gymnasium.make("arborl/Sokoban-v0", obs_type=obs_type)
    obs, _ = env.reset(options={"task": task})
    env.close()
    return list(obs)


def test_the_engine_generates_from_images_as_transformers_does(tiny_vlm, processor, vlm, task):
    messages = opening(task)
    inputs = processor.apply_chat_template(
        messages, tokenize=True, return_dict=True, add_generation_prompt=True, return_tensors="pt"
    )
    with torch.no_grad():
        expected = vlm.generate(**inputs, max_new_tokens=12, do_sample=False, eos_token_id=[])
    expected = expected[0, inputs["input_ids"].shape[1] :].tolist()
    prompt = inputs["input_ids"][0].tolist()
    images = ImageInputs(inputs["pixel_values"].numpy(), inputs["image_grid_thw"].numpy())
    text_prompt = processor.tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    engine = make_engine(HFEngineConfig(model=str(tiny_vlm)))
    assert engine.accepts_images
    greedy = SamplingParams(temperature=0, max_new_tokens=12, ignore_eos=True)

    async def run():
        # an image row and a text row decode in one batch; each as it would alone
        both = await engine.generate([prompt, text_prompt], greedy, images=[images, None])
        alone = await engine.generate([text_prompt], greedy)
        await engine.close()
        return both, alone

    (with_image, text), (text_alone,) = asyncio.run(run())
    assert with_image.token_ids == expected
    assert text.token_ids == text_alone.token_ids
    reference = engine.score(prompt, with_image.token_ids, images=images)  # float64, one forward pass
    assert np.allclose(with_image.logprobs, reference.numpy(), atol=1e-4)
    other = ImageInputs(np.zeros_like(images.pixel_values), images.image_grid_thw)
    assert not np.allclose(
        engine.score(prompt, with_image.token_ids, images=other).numpy(), reference.numpy()
    )


def play(tiny_vlm, processor, task, config: AgentConfig):
    """One picture-Sokoban episode of the tiny VLM through the transformers engine."""
    engine = make_engine(HFEngineConfig(model=str(tiny_vlm)))
    agent = Agent(engine, processor, config)
    env = gymnasium.make("arborl/Sokoban-v0", obs_type="image")

    async def run():
        ep = await agent.run_episode(env, task, group_id="g")
        await engine.close()
        return ep

    ep = asyncio.run(run())
    env.close()
    return ep


def test_an_episode_keeps_the_processors_ids_and_pixels_and_the_learner_agrees(
    tiny_vlm, processor, vlm, task
):
    config = AgentConfig(
        max_turns=3, max_new_tokens=8, max_context_tokens=4096, sampling=SamplingParams(seed=3)
    )
    ep = play(tiny_vlm, processor, task, config)
    traj = ep.trajectory
    assert ep.error is None and len(traj.turns) == 3, ep.error
    # the prompt is the processor's own rendering of reset's messages, ids and pixels
    reference = processor.apply_chat_template(
        opening(task), tokenize=True, return_dict=True, add_generation_prompt=True, return_tensors="np"
    )
    assert traj.prompt_ids == reference["input_ids"][0].tolist()
    assert np.array_equal(traj.prompt_images.pixel_values, reference["pixel_values"])
    # each kept observation carries its own image, processed by the processor's image processor
    pictures = message_images([m for m in ep.messages[1:] if m["role"] == "user"])
    kept = [t.observation_images for t in traj.turns if t.observation_ids]
    assert all(k is not None and k.num_images == 1 for k in kept)
    ip = processor.image_processor(images=pictures[: len(kept)], return_tensors="np")
    assert np.array_equal(np.concatenate([k.pixel_values for k in kept]), ip["pixel_values"])
    everything = traj.images()
    pads = int((traj.token_ids() == processor.image_token_id).sum())
    assert (
        pads == int(everything.image_grid_thw.prod(axis=1).sum()) // processor.image_processor.merge_size**2
    )
    # the learner: one forward pass over the stored ids and pixels, nothing re-tokenised
    learner = learner_logprobs(vlm, traj)
    mask = traj.loss_mask()[1:].astype(bool)
    assert np.allclose(learner[mask], traj.behavior_logprobs()[1:][mask], atol=1e-4)
    # and a float64 copy agrees turn by turn, each turn scored after the images before it
    reference = copy.deepcopy(vlm).double()
    for k, (turn, (a, _)) in enumerate(zip(traj.turns, traj.turn_spans(), strict=True)):
        before = ImageInputs.concat([traj.prompt_images, *(t.observation_images for t in traj.turns[:k])])
        ref = score_with_images(reference, traj.token_ids()[:a].tolist(), turn.response_ids, before)
        assert np.allclose(ref.numpy(), turn.response_logprobs, atol=1e-4)


def test_parquet_carries_images_bit_for_bit_and_reads_v6(tmp_path, processor, task):
    messages = opening(task)
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids, images = ImageEncoder(processor).encode(text, messages)
    # the pictures kept are the observation's own pixels (what a server's processor takes)
    shown = [
        p["image"]
        for m in messages
        if isinstance(m["content"], list)
        for p in m["content"]
        if p.get("type") == "image"
    ]
    assert len(images.pictures) == len(shown) == 1 and np.array_equal(images.pictures[0], shown[0])
    odd = ImageInputs(
        images.pixel_values * np.float32(1 / 3), images.image_grid_thw
    )  # values no decimal round-trips; no pictures (as a v7 file's)
    traj = Trajectory(
        prompt_ids=ids,
        prompt_images=images,
        turns=[Turn([5, 6], [-0.5, -0.25], [7], observation_images=odd), Turn([8], [-0.125])],
    )
    path = write_trajectories(tmp_path / "t.parquet", [traj, Trajectory(prompt_ids=[1])])
    back, plain = read_trajectories(path)
    assert back == traj and plain.prompt_images is None
    assert back.prompt_images.pixel_values.dtype == np.float32
    assert back.turns[0].observation_images == odd and back.turns[1].observation_images is None
    assert back.images() == ImageInputs.concat([images, odd])
    assert np.array_equal(back.prompt_images.pictures[0], images.pictures[0])  # PNG: lossless
    assert back.turns[0].observation_images.pictures == () and back.images().pictures == ()
    assert SCHEMA_VERSION == 8
    (old,) = read_trajectories(V6_FILE)
    assert old.prompt_ids == [1, 2, 3] and old.turns[0].step_label == 1.0 and old.episode_id == "e"
    assert old.prompt_images is None and old.images() is None


def test_a_text_policy_given_images_fails_at_start_naming_the_fix(tiny_model, tiny_vlm, task):
    text_engine = make_engine(HFEngineConfig(model=str(tiny_model)))
    tok = AutoTokenizer.from_pretrained(tiny_model)
    env = gymnasium.make("arborl/Sokoban-v0", obs_type="image")
    with pytest.raises(VisionError, match=r"vision-language model .* obs_type='text'"):
        asyncio.run(Agent(text_engine, tok).start(env, task))
    with pytest.raises(Exception, match="no vision tower"):
        asyncio.run(text_engine.generate([[1, 2]], SamplingParams(max_new_tokens=1), images=[object()]))
    # a VLM's processor with an engine that takes no images (its kind named)
    with pytest.raises(VisionError, match="does not take images"):
        asyncio.run(Agent(text_engine, load_processor(tiny_vlm)).start(env, task))
    asyncio.run(text_engine.close())
    env.close()


def test_tree_rollout_leaves_keep_their_images_and_the_learner_agrees(tiny_vlm, processor, vlm, task):
    from functools import partial

    from arborl.agents.tree_rollout import TreeConfig, TreeRollout
    from arborl.envs.sokoban.env import SokobanEnv

    engine = make_engine(HFEngineConfig(model=str(tiny_vlm)))
    agent = Agent(engine, processor, AgentConfig(max_turns=2, max_new_tokens=6, max_context_tokens=4096))
    cfg = TreeConfig(leaves=3, roots=1, branch_at="both", token_logprob_threshold=0.0)

    async def run():
        result = await TreeRollout(agent, partial(SokobanEnv, obs_type="image"), cfg).run(task)
        await engine.close()
        return result

    result = asyncio.run(run())
    leaves = result.leaves
    assert len(leaves) == 3 and result.forks["turn"] + result.forks["token"] > 0  # forks replayed the images
    for leaf in leaves:
        images = leaf.images()
        assert leaf.prompt_images is not None and images.num_images == 1 + sum(
            t.observation_images is not None for t in leaf.turns
        )
        learner = learner_logprobs(vlm, leaf)
        mask = leaf.loss_mask()[1:].astype(bool)
        assert np.allclose(learner[mask], leaf.behavior_logprobs()[1:][mask], atol=1e-4)


@pytest.mark.parametrize("context", ["sliding_window", "summarize"])
def test_a_context_rewritten_past_its_budget_keeps_each_segments_pictures(
    tiny_vlm, processor, vlm, task, context
):
    """An image episode that outgrows max_context_tokens goes on in new segments: each
    segment's prompt shows the opening picture and the pictures of the turns still in view,
    its placeholders match its images, and the learner's one forward over the segment (ids
    and pixels as stored) gives the engine's log-probs. Before, images with a rewritten context
    were refused at start."""
    opening_len = len(
        ImageEncoder(processor).encode(
            processor.apply_chat_template(opening(task), tokenize=False, add_generation_prompt=True),
            opening(task),
        )[0]
    )
    # room for the opening prompt and two turns (each observation repeats the prompt's text
    # with its picture, about as long as the opening)
    config = AgentConfig(
        max_turns=6,
        max_new_tokens=8,
        max_context_tokens=3 * opening_len + 100,
        context=context,
        sampling=SamplingParams(seed=5),
    )
    ep = play(tiny_vlm, processor, task, config)
    assert ep.error is None, ep.error
    segments = ep.segments
    assert len(segments) >= 2, "the budget should have been outgrown"
    shown = message_images([m for m in ep.messages if m["role"] == "user"])  # reset's, then each step's
    merge = processor.image_processor.merge_size**2
    for k, seg in enumerate(segments):
        images = seg.images()
        pads = int((seg.token_ids() == processor.image_token_id).sum())
        assert pads == int(images.image_grid_thw.prod(axis=1).sum()) // merge, f"segment {k}"
        assert len(images.pictures) == images.num_images
        # every segment starts from the opening prompt: its first picture is the opening room
        assert np.array_equal(seg.prompt_images.pictures[0], shown[0])
        # each picture is one the env showed, in the order shown
        where = [next(i for i, s in enumerate(shown) if np.array_equal(s, p)) for p in images.pictures]
        assert where == sorted(where), f"segment {k}: pictures out of order"
        mask = seg.loss_mask()[1:].astype(bool)
        learner = learner_logprobs(vlm, seg)
        assert np.allclose(learner[mask], seg.behavior_logprobs()[1:][mask], atol=1e-4), f"segment {k}"
    if context == "sliding_window":
        later = segments[1]
        # the newest picture of a later segment's prompt is the observation that overflowed
        # before it, and older turns' pictures were dropped with their turns
        assert later.prompt_images.num_images < 1 + len(segments[0].turns) + 1
        assert later.prompt_images.num_images >= 2
    else:
        assert any(s.metrics.get("summary") for s in segments)


def test_a_stored_picture_reads_back_as_it_was_whatever_its_size(tmp_path):
    """Pictures come back pixel for pixel, a wide screenshot too: the env's bounds applied when
    it was shown, the reader applies none (the default bounds would shrink it to 1024)."""
    rng = np.random.default_rng(0)
    wide = rng.integers(0, 256, (20, 1300, 3), dtype=np.uint8)
    images = ImageInputs(np.zeros((4, 8), np.float32), np.array([[1, 2, 2]]), (wide,))
    traj = Trajectory(prompt_ids=[1, 2], prompt_images=images)
    (back,) = read_trajectories(write_trajectories(tmp_path / "t.parquet", [traj]))
    assert np.array_equal(back.prompt_images.pictures[0], wide)
