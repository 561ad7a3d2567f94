"""A vision-language policy's episodes in verl's agent loop (issue 52 §5), checked against
verl's own code: each request hands verl's server the pictures of its prompt (``image_data``),
and the loop's output names the episode's pictures (``multi_modal_data["images"]``), from
which verl's worker, running its own processor (`AgentLoopWorker._compute_multi_modal_inputs`,
called here unchanged), rebuilds exactly the pixels and grids arborl's turns stored, and the
M-RoPE positions from them (verl's ``_compute_position_ids``) equal the model's own.

The "server" is the transformers engine behind verl's server-manager call: it runs the tiny
VLM's image processor on ``image_data``, as vLLM or SGLang run theirs, so an episode generates
only if the pictures it is handed are the ones the agent's prompt holds."""

from __future__ import annotations

import asyncio
import copy
from types import SimpleNamespace

import gymnasium
import numpy as np
import pytest
import torch
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

import arborl.envs  # noqa: F401 - registers the ids
from arborl.agents import Agent, AgentConfig
from arborl.agents.engines import HFEngineConfig, SamplingParams, make_engine
from arborl.agents.vision import ImageInputs, VisionError, load_processor, rope_positions
from arborl.tasks import get_suite
from arborl.trainer.verl.agent_loop import VerlServerEngine, kept_pictures


@pytest.fixture(scope="module")
def processor(tiny_vlm):
    return load_processor(tiny_vlm)


class PictureServer:
    """verl's ``server_manager.generate(request_id, prompt_ids=, sampling_params=, image_data=)``
    in front of the transformers engine; records each request's pictures."""

    def __init__(self, engine, processor) -> None:
        self.engine, self.processor, self.requests = engine, processor, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None):
        self.requests.append((list(prompt_ids), image_data))
        images = None
        if image_data:
            out = self.processor.image_processor(images=image_data, return_tensors="np")
            images = [ImageInputs(out["pixel_values"], out["image_grid_thw"])]
        sampling = SamplingParams(
            temperature=sampling_params["temperature"], max_new_tokens=sampling_params["max_tokens"]
        )
        (gen,) = await self.engine.generate([prompt_ids], sampling, images=images)
        return SimpleNamespace(token_ids=gen.token_ids, log_probs=gen.logprobs)


@pytest.fixture(scope="module")
def episode(tiny_vlm, processor):
    """One picture-Sokoban episode of the tiny VLM through `VerlServerEngine`."""
    engine = make_engine(HFEngineConfig(model=str(tiny_vlm)))
    server = PictureServer(engine, processor)
    verl_engine = VerlServerEngine(server, [processor.tokenizer.eos_token_id], accepts_images=True)
    agent = Agent(verl_engine, processor, AgentConfig(max_turns=3, max_new_tokens=8, max_context_tokens=4096))
    env = gymnasium.make("arborl/Sokoban-v0", obs_type="image")
    task = get_suite("sokoban-6x6").tasks()[0]
    ep = asyncio.run(agent.run_episode(env, task))
    env.close()
    asyncio.run(engine.close())
    return ep.trajectory, server


def test_each_request_hands_the_server_the_pictures_of_its_prompt(episode, processor):
    traj, server = episode
    assert len(traj.turns) >= 2 and len(server.requests) == len(traj.turns)
    for k, (prompt, pictures) in enumerate(server.requests):
        held = ImageInputs.concat([traj.prompt_images, *(t.observation_images for t in traj.turns[:k])])
        assert held is not None and len(pictures) == held.num_images == k + 1
        out = processor.image_processor(images=pictures, return_tensors="np")
        assert np.array_equal(out["pixel_values"], held.pixel_values)  # bit for bit
        a, _ = traj.turn_spans()[k]
        assert prompt == traj.token_ids()[:a].tolist()


def verl_worker(processor, tiny_vlm):
    """Just what verl's `AgentLoopWorker` reads in its multimodal post-processing: its
    processor, with the model's get_rope_index bound to it as verl's `hf_processor` binds it
    for a Qwen2VLProcessor (here the image-only one: this venv has no torchvision, without
    which verl's AutoProcessor call gives up)."""
    import copy
    import types

    from transformers import AutoConfig
    from transformers.models.qwen2_vl import Qwen2VLModel

    bound = copy.copy(processor)
    bound.config = AutoConfig.from_pretrained(tiny_vlm)
    bound.get_rope_index = types.MethodType(Qwen2VLModel.get_rope_index, bound)
    if hasattr(Qwen2VLModel, "get_vision_position_ids"):
        bound.get_vision_position_ids = types.MethodType(Qwen2VLModel.get_vision_position_ids, bound)
    return SimpleNamespace(
        processor=bound, tokenizer=processor.tokenizer, _get_mm_processor_kwargs=lambda audio=None: {}
    )


def test_verls_worker_rebuilds_the_stored_pixels_from_the_outputs_pictures(episode, processor, tiny_vlm):
    traj, _ = episode
    ids = traj.token_ids().tolist()
    pictures = kept_pictures(traj, ids, processor)
    assert len(pictures) == traj.images().num_images
    output = SimpleNamespace(multi_modal_data={"images": pictures}, mm_processor_kwargs=None)
    worker = verl_worker(processor, tiny_vlm)
    mm = AgentLoopWorker._compute_multi_modal_inputs(worker, output, torch.tensor([ids]))
    assert np.array_equal(mm["pixel_values"].numpy(), traj.images().pixel_values)
    assert np.array_equal(mm["image_grid_thw"].numpy(), traj.images().image_grid_thw)


def test_verls_positions_from_those_inputs_are_the_models_own(episode, processor, tiny_vlm):
    from transformers import Qwen2VLForConditionalGeneration

    traj, _ = episode
    ids = traj.token_ids().tolist()
    output = SimpleNamespace(
        multi_modal_data={"images": kept_pictures(traj, ids, processor)}, mm_processor_kwargs=None
    )
    worker = verl_worker(processor, tiny_vlm)
    mm = AgentLoopWorker._compute_multi_modal_inputs(worker, output, torch.tensor([ids]))
    positions = AgentLoopWorker._compute_position_ids(
        worker, torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long), mm, {}
    )
    vlm = Qwen2VLForConditionalGeneration.from_pretrained(tiny_vlm)
    expected = rope_positions(vlm, ids, traj.images())  # [3, L]
    assert torch.equal(positions[0, -3:].cpu(), expected), "verl's M-RoPE rows differ from the model's"


def test_a_cut_through_an_image_is_refused_and_pictures_past_the_cut_are_left_out(episode, processor):
    traj, _ = episode
    ids = traj.token_ids().tolist()
    image_token = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    where = [i for i, t in enumerate(ids) if t == image_token]
    first_len = int(traj.images().image_grid_thw[0].prod()) // processor.image_processor.merge_size**2
    # cut after the first image's last placeholder: one picture
    end_first = where[first_len - 1] + 1
    assert len(kept_pictures(traj, ids[:end_first], processor)) == 1
    with pytest.raises(ValueError, match="inside an image's placeholder tokens"):
        kept_pictures(traj, ids[: end_first - 1], processor)
    # pictures not kept (a trajectory stored before v8): a clear error, never wrong pixels
    old = copy.copy(traj)
    old.prompt_images = ImageInputs(traj.prompt_images.pixel_values, traj.prompt_images.image_grid_thw)
    with pytest.raises(VisionError, match="pictures were not kept"):
        kept_pictures(old, ids, processor)


def test_a_policy_that_samples_image_placeholders_is_refused_not_misaligned(episode, processor):
    """An adversarial (or untamed) policy on a server that lets it sample the image placeholder
    id: its reply would shift every later picture's pixels onto the wrong tokens. The episode
    is refused with the cause named, never handed to verl misaligned."""
    from arborl.agents.engines import EngineError

    traj, _ = episode
    image_token = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    forged = copy.copy(traj)
    forged.turns = [copy.copy(t) for t in traj.turns]
    forged.turns[-1].response_ids = [*traj.turns[-1].response_ids, image_token]
    with pytest.raises(EngineError, match="sampled a vision placeholder id"):
        kept_pictures(forged, forged.token_ids().tolist(), processor)
