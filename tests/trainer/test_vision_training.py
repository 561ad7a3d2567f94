"""Training a vision-language policy (issue 52 §5) with the tiny VLM on Sokoban's pictures.

- the batch carries each row's pixels and grids as verl's ``multi_modal_inputs`` and
  ``[B, 4, L]`` positions (text, then M-RoPE computed on the unpadded row), and the learner's
  forward over it gives the engine's behaviour log-probs;
- ``model.freeze_vision`` keeps the tower's weights (and out of the optimiser), or trains it;
- ``arborl train`` runs GRPO and GiGPO on ``sokoban-6x6-image`` end to end, each batch's
  learner log-probs equal to the engine's (sync mode);
- GiGPO's anchors there are the room's state hash, the same whatever path led to it.
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import gymnasium
import pytest
import torch
from safetensors.torch import load_file
from train_cli import train_steps
from transformers import Qwen2VLForConditionalGeneration
from verl.utils.model import compute_position_id_with_mask, extract_multi_modal_inputs

import arborl.envs  # noqa: F401 - registers the ids
from arborl.agents import Agent, AgentConfig
from arborl.agents.engines import Generation, HFEngineConfig, InferenceEngine, SamplingParams, make_engine
from arborl.agents.trajectory import read_trajectories
from arborl.agents.vision import (
    ImageInputs,
    is_processor,
    load_policy_tokenizer,
    load_processor,
    model_inputs,
    rope_positions,
)
from arborl.tasks import get_suite
from arborl.trainer.dataproto import trajectories_to_dataproto
from arborl.trainer.local.config import TrainConfig
from arborl.trainer.local.learner import Learner, LearnerConfig
from arborl.trainer.local.policy import prepare_vision, tiny_model_dir

#: `arborl train` overrides of the short sync runs below: the tiny VLM on picture-Sokoban.
IMAGE_SOKOBAN_RUN = (
    "model.tiny_vlm=true",
    "tasks.train=suite:sokoban-6x6-image",
    "tasks.eval_suite=sokoban-6x6-image",
    "tasks.eval_size=1",
    "algorithm.drop_uniform_groups=false",  # an untrained policy's groups all fail alike
    "learner.entropy_coeff=0.01",  # so each step changes the weights the next batch samples with
    "learner.lr=1e-3",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=8",
    "rollout.max_context_tokens=2048",
    "async.mode=sync",
)


@pytest.fixture(scope="module")
def processor(tiny_vlm):
    return load_processor(tiny_vlm)


@pytest.fixture(scope="module")
def episodes(tiny_vlm, processor):
    """Two picture episodes of different lengths and one text episode, sampled by the engine."""
    engine = make_engine(HFEngineConfig(model=str(tiny_vlm)))
    task = get_suite("sokoban-6x6").tasks()[0]

    async def run():
        out = []
        for turns, obs_type, seed in [(3, "image", 1), (2, "image", 2), (2, "text", 3)]:
            config = AgentConfig(
                max_turns=turns, max_new_tokens=8, max_context_tokens=4096, sampling=SamplingParams(seed=seed)
            )
            env = gymnasium.make("arborl/Sokoban-v0", obs_type=obs_type)
            out.append(
                (await Agent(engine, processor, config).run_episode(env, task, group_id="g")).trajectory
            )
            env.close()
        await engine.close()
        return out

    trajs = asyncio.run(run())
    assert [t.images() is not None for t in trajs] == [True, True, False]
    assert len(trajs[0].token_ids()) != len(trajs[1].token_ids())  # rows padded differently
    return trajs


def vlm_of(path: Path) -> Qwen2VLForConditionalGeneration:
    return Qwen2VLForConditionalGeneration.from_pretrained(path, dtype=torch.float32)


def test_the_batch_carries_pixels_and_positions_as_verl_does_and_the_learner_agrees(
    tiny_vlm, processor, episodes
):
    model = vlm_of(tiny_vlm)
    pad = processor.tokenizer.pad_token_id
    with pytest.raises(ValueError, match="rope_index"):
        trajectories_to_dataproto(episodes, pad)
    data = trajectories_to_dataproto(episodes, pad, rope_index=functools.partial(rope_positions, model))
    b, n = data.batch, len(episodes)
    width = b["input_ids"].shape[1]
    assert b["position_ids"].shape == (n, 4, width)
    mm = data.non_tensor_batch["multi_modal_inputs"]
    assert mm.dtype == object and mm.shape == (n,) and mm[2] == {}
    for i, t in enumerate(episodes):
        valid = b["attention_mask"][i].bool()
        assert b["input_ids"][i, valid].tolist() == t.token_ids().tolist()
        # text positions as a text batch has them; M-RoPE as the engine's prefill computed them
        assert torch.equal(
            b["position_ids"][i, 0], compute_position_id_with_mask(b["attention_mask"][i : i + 1])[0]
        )
        images = t.images()
        want = model_inputs(model, t.token_ids().tolist(), images).get("position_ids")
        want = torch.arange(len(t.token_ids())).expand(3, -1) if want is None else want[:, 0]
        assert torch.equal(b["position_ids"][i, 1:, valid], want)
        if images is not None:
            assert ImageInputs(mm[i]["pixel_values"].numpy(), mm[i]["image_grid_thw"].numpy()) == images
            assert not torch.equal(want[1], want[2])  # the picture's rows and columns differ
    # verl's own collation of the rows' inputs: pixels in row order
    both = extract_multi_modal_inputs(list(mm))
    assert torch.equal(both["pixel_values"], torch.cat([mm[0]["pixel_values"], mm[1]["pixel_values"]]))
    # the learner (micro-batches of 2: a picture row beside the text row, padding in both)
    learner = Learner(model, LearnerConfig(micro_batch_size=2))
    logp = learner.compute_logprobs(data)
    mask = b["response_mask"].bool()
    gap = (logp - b["rollout_log_probs"])[mask].abs()
    assert gap.max() < 1e-4, gap.max()
    # a text-only batch keeps the text layout: 2-D positions, no multi_modal_inputs
    text = trajectories_to_dataproto(episodes[2:], pad, rope_index=functools.partial(rope_positions, model))
    assert text.batch["position_ids"].dim() == 2 and "multi_modal_inputs" not in text.non_tensor_batch


@pytest.mark.parametrize("freeze", [True, False])
def test_freeze_vision_keeps_the_tower_out_of_the_update(tiny_vlm, processor, episodes, freeze):
    model = vlm_of(tiny_vlm)
    rope = prepare_vision(model, freeze)
    tower = {k: v.clone() for k, v in model.model.visual.state_dict().items()}
    text = {k: v.clone() for k, v in model.model.language_model.state_dict().items()}
    learner = Learner(model, LearnerConfig(lr=1e-2, micro_batch_size=2))
    held = {id(p) for g in learner.optimizer.param_groups for p in g["params"]}
    assert any(id(p) in held for p in model.model.visual.parameters()) is not freeze
    data = trajectories_to_dataproto(episodes, processor.tokenizer.pad_token_id, rope_index=rope)
    data.batch["advantages"] = (
        torch.linspace(-1, 1, len(episodes)).unsqueeze(1).expand_as(data.batch["responses"])
    )
    metrics = learner.ppo_update(data)
    assert metrics["actor/grad_norm"] > 0
    after = model.model.visual.state_dict()
    assert all(torch.equal(tower[k], after[k]) for k in tower) is freeze
    assert not all(torch.equal(v, model.model.language_model.state_dict()[k]) for k, v in text.items())


@pytest.mark.parametrize("estimator", ["grpo", "gigpo"])
def test_arborl_train_runs_on_image_sokoban_with_the_engines_logprobs(tmp_path, estimator):
    """Two sync RL steps of `arborl train` on the tiny VLM: each batch's learner log-probs (from
    the stored ids, pixels and positions) equal the engine's behaviour log-probs; GRPO keeps the
    tower frozen (the default), GiGPO trains it (model.freeze_vision=false)."""
    freeze = estimator == "grpo"
    run = tmp_path / estimator
    rl = train_steps(
        run,
        "arborl/Sokoban-v0",
        *IMAGE_SOKOBAN_RUN,
        f"model.freeze_vision={str(freeze).lower()}",
        f"algorithm.estimator={estimator}",
    )
    assert all(e["batch/trajectories"] == 2 and e["actor/grad_norm"] > 0 for e in rl), rl
    assert all(e["offpolicy/log_ratio_abs_mean"] < 1e-3 for e in rl), [
        e["offpolicy/log_ratio_abs_mean"] for e in rl
    ]
    trajs = [t for f in sorted((run / "trajectories").glob("*.parquet")) for t in read_trajectories(f)]
    assert trajs and all(t.images() is not None and t.turns for t in trajs)
    # the main job's tiny model as the text half (train_cli's model.tiny={} keeps its size)
    base = tiny_model_dir(TrainConfig.main_job().model.model_copy(update={"tiny_vlm": True}))
    start = load_file(str(Path(base) / "model.safetensors"))
    (final,) = sorted((run / "checkpoints").glob("*/model/model.safetensors"))[-1:]
    end = load_file(str(final))
    changed = {k for k in start if not torch.equal(start[k], end[k])}
    tower = {k for k in start if k.startswith("visual.") or ".visual." in k}
    assert tower and changed - tower  # the text model trained
    assert bool(changed & tower) is not freeze, sorted(changed & tower)
    assert is_processor(load_policy_tokenizer(final.parent))  # what arborl eval model.path= loads


class _Replies(InferenceEngine):
    """Fixed replies for a policy that takes images (the moves a test plays)."""

    kind = "scripted"
    accepts_images = True

    def __init__(self, tokenizer, replies):
        self.tok, self.replies = tokenizer, list(replies)

    async def generate(self, prompts, sampling, images=None):
        ids = [*self.tok.encode(self.replies.pop(0), add_special_tokens=False), self.tok.eos_token_id]
        return [Generation(prompt_index=0, token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop",
                           num_prompt_tokens=len(prompts[0]))]  # fmt: skip

    async def update_weights(self, weights):
        raise NotImplementedError

    async def close(self):
        pass


def test_gigpo_anchors_on_pictures_are_the_rooms_state_not_its_pixels(processor):
    """Two picture episodes reach the start room again by different paths (left-right,
    right-left): their third turns share an anchor, the room's state hash, which a text
    episode walking the same room has too; their second turns (different rooms) do not."""
    paths = (["Left", "Right", "Up"], ["Right", "Left", "Up"])

    def walk(task, obs_type, moves):
        engine = _Replies(processor.tokenizer, [f"<think>go</think><action>{m}</action>" for m in moves])
        env = gymnasium.make("arborl/Sokoban-v0", obs_type=obs_type)
        agent = Agent(engine, processor, AgentConfig(max_turns=3, max_context_tokens=8192))
        traj = asyncio.run(agent.run_episode(env, task, group_id="g")).trajectory
        env.close()
        return traj

    for task in get_suite("sokoban-6x6").tasks():
        a, b = (walk(task, "image", p) for p in paths)
        walked = [[t.anchor_state_hash for t in traj.turns] for traj in (a, b)]
        # a room where both first moves moved the player and the second moved it back (no box)
        if all(len(h) == 3 and h[0] != h[1] and h[2] == h[0] for h in walked):
            break
    else:
        pytest.fail("no room lets the player step both left and right")
    assert a.images() is not None and b.images() is not None
    text = walk(task, "text", paths[0])
    data = trajectories_to_dataproto([a, b, text], processor.tokenizer.pad_token_id, rope_index=_positions)
    anchors = data.non_tensor_batch["anchor_state_hashes"]
    assert anchors[0][2] == anchors[1][2] == anchors[0][0] != ""  # back in the start room
    assert anchors[0][1] != anchors[1][1]  # one step left, one step right
    assert list(anchors[2]) == list(anchors[0])  # the same rooms shown as text: the same states


def _positions(ids, images):
    """Positions that only shape-check (the anchors test needs the batch's columns, not a model)."""
    return torch.arange(len(ids)).expand(3, -1)


def test_a_vlm_never_samples_its_vision_tokens_and_the_learner_agrees(tiny_vlm, processor):
    """A sampled image placeholder (or its delimiters) would be taken for a picture by every
    later forward, which then fails (get_rope_index's StopIteration, "image features and image
    tokens do not match"). The engine takes those ids out of what it samples and scores, and the
    learner out of its distribution: 2048 tokens at temperature 1 from the untrained tiny VLM
    (near uniform over 2053 ids, so ~4 of them would be vision ids) hold none, and the engine's,
    the float64 reference's and the learner's log-probs still agree."""
    from arborl.agents import Trajectory, Turn
    from arborl.agents.vision import vision_token_ids

    never = vision_token_ids(vlm_of(tiny_vlm))
    assert len(never) == 4  # image, video, vision start, vision end
    engine = make_engine(HFEngineConfig(model=str(tiny_vlm)))
    prompts = [processor.tokenizer.encode(f"room {i}: move") for i in range(8)]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=256, seed=3, stop_token_ids=[])

    async def run() -> list[Generation]:
        try:
            return await engine.generate(prompts, sampling)
        finally:
            await engine.close()

    gens = asyncio.run(run())
    sampled = [t for g in gens for t in g.token_ids]
    assert len(sampled) > 1500 and not set(sampled) & set(never)
    g = gens[0]
    ref = engine.score(prompts[0], g.token_ids, temperature=1.0)
    assert (ref - torch.tensor(g.logprobs, dtype=torch.float64)).abs().max() < 1e-4
    trajs = [
        Trajectory(prompt_ids=list(prompts[x.prompt_index]), turns=[Turn(x.token_ids, x.logprobs)])
        for x in gens
    ]
    data = trajectories_to_dataproto(trajs, processor.tokenizer.pad_token_id)
    logp = Learner(vlm_of(tiny_vlm), LearnerConfig(micro_batch_size=4)).compute_logprobs(data)
    mask = data.batch["response_mask"].bool()
    assert (logp - data.batch["rollout_log_probs"])[mask].abs().max() < 1e-4


@pytest.mark.parametrize("freeze", [True, pytest.param(False, marks=pytest.mark.full)])  # CI: the default
def test_lora_on_a_vlm_adapts_the_tower_only_when_it_is_trained(tmp_path, freeze):
    """model.lora on the tiny VLM: all-linear used to put adapters in the vision tower too,
    training the tower that model.freeze_vision (default true) freezes. Frozen, the tower has
    no adapter; trained, it has one. Either way the engine's log-probs after each adapter push
    equal the learner's (sync mode)."""
    run = tmp_path / f"lora-{freeze}"
    rl = train_steps(
        run,
        "arborl/Sokoban-v0",
        *IMAGE_SOKOBAN_RUN,
        "model.lora.r=8",
        f"model.freeze_vision={str(freeze).lower()}",
    )
    assert all(e["offpolicy/log_ratio_abs_mean"] < 1e-3 for e in rl), rl
    (saved,) = (run / "checkpoints").glob("step-*/model/adapter_model.safetensors")
    keys = list(load_file(saved))
    assert any(".visual." not in k for k in keys)
    assert any(".visual." in k for k in keys) is not freeze


def test_a_lora_target_only_in_a_frozen_tower_is_refused(tiny_vlm):
    from arborl.trainer.local.lora import LoraSettings, LoraTargetError, attach_lora, frozen_tower_modules

    model = vlm_of(tiny_vlm)
    frozen = frozen_tower_modules(model, True)
    assert frozen and all(n.startswith("model.visual") for n in frozen)
    assert frozen_tower_modules(model, False) == []
    with pytest.raises(LoraTargetError, match="freeze_vision"):
        attach_lora(model, LoraSettings(r=4, targets=["qkv"]), exclude=frozen)
    with pytest.raises(LoraTargetError, match="matches no linear module"):  # a typo stays a typo
        attach_lora(model, LoraSettings(r=4, targets=["q_prj"]), exclude=frozen)


def test_a_tree_run_on_pictures_trains_with_the_engines_logprobs(tmp_path):
    """rollout.tree on sokoban-6x6-image with the tiny VLM: the leaves fork from one another
    (a pair shares more than the prompt), keep their pictures, and each batch's learner
    log-probs equal the engine's (sync mode, the tree estimator)."""
    run = tmp_path / "tree"
    rl = train_steps(
        run,
        "arborl/Sokoban-v0",
        *IMAGE_SOKOBAN_RUN,
        "+rollout.tree={leaves: 4, roots: 2, branches: 2}",
        "algorithm.estimator=tree",
        "rollout.max_turns=3",  # after the shared 2: train_steps keeps the last value of a key
    )
    assert all(e["batch/trajectories"] == 4 and e["offpolicy/log_ratio_abs_mean"] < 1e-3 for e in rl), rl
    leaves = read_trajectories(sorted((run / "trajectories").glob("*.parquet"))[0])
    assert len(leaves) == 4 and all(t.images() is not None for t in leaves)

    def shared(a, b) -> int:
        x, y = a.token_ids(), b.token_ids()
        n = min(len(x), len(y))
        return next((i for i in range(n) if x[i] != y[i]), n)

    prompt = len(leaves[0].prompt_ids)
    assert max(shared(a, b) for i, a in enumerate(leaves) for b in leaves[i + 1 :]) > prompt
