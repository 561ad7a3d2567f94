"""The agent loop on the real tiny model (transformers engine) and real envs.

The invariant under test: the ids the trainer gets are exactly the ids the engine consumed
and produced, turn by turn, delimiters included, with the loss mask on sampled tokens only.
"""

from __future__ import annotations

import asyncio

import gymnasium
import numpy as np
import pytest
from agent_helpers import agent_for
from countdown import Countdown

import arborl.envs  # noqa: F401 - registers the arborl/* ids
from arborl.agents import Agent, AgentConfig, ForkMismatch
from arborl.agents.engines import InferenceEngine, SamplingParams
from arborl.tasks import CodeTask, ToolTask

ANSWER_TASK = ToolTask(id="six-sevens", question="What is 6 * 7? Use python.", answer=42, verifier="numeric")


async def test_trajectory_ids_are_exactly_what_the_engine_consumed_and_produced(engine, tok):
    agent = agent_for(engine, tok, max_turns=3)
    ep = await agent.run_episode(Countdown(), {"id": "c", "start": 3}, group_id="g")
    traj = ep.trajectory
    ids, mask, logp = traj.token_ids(), traj.loss_mask(), traj.behavior_logprobs()
    assert len(engine.calls) == len(traj.turns) == 3
    for (prompt, response, logprobs), (start, end), turn in zip(
        engine.calls, traj.turn_spans(), traj.turns, strict=True
    ):
        assert ids[:start].tolist() == prompt  # what the engine was fed, token for token
        assert ids[start:end].tolist() == response == turn.response_ids
        np.testing.assert_allclose(logp[start:end], logprobs, rtol=0, atol=1e-6)
        assert mask[start:end].all() and turn.policy_versions == [0] * len(response)
    assert mask.sum() == traj.num_response_tokens  # env tokens (and the prompt) are never trained on
    assert traj.terminated and traj.outcome_reward == 1.0 and traj.truncation is None
    assert traj.group_id == "g" and ep.error is None and traj.metrics["turns"] == 3


async def test_demonstrations_tokenize_like_the_chat_template(docker_backend, tok):
    """Scripted replies recorded by the agent equal the template's rendering of the whole
    conversation: the delimiters between turns are right (this is the SFT data path)."""
    env = gymnasium.make("arborl/Tool-v0", backend=docker_backend)
    replies = iter(
        ['<tool_call>\n{"name": "python", "arguments": {"code": "print(6*7)"}}\n</tool_call>', "42"]
    )
    agent = agent_for(None, tok, max_turns=4)
    try:
        ep = await agent.run_episode(env, ANSWER_TASK, demo=lambda messages, info: next(replies))
    finally:
        await env.unwrapped.aclose()
    traj = ep.trajectory
    assert traj.outcome_reward == 1.0 and traj.terminated
    assert "42" in ep.messages[-2]["content"]  # the python tool really ran in the sandbox
    tools = ep.infos[0]["tools"]
    rendered = tok.apply_chat_template(ep.messages[:-1], tools=tools, tokenize=False)
    assert traj.token_ids().tolist() == tok.encode(rendered.rstrip("\n"), add_special_tokens=False)
    assert set(traj.policy_versions()[traj.loss_mask() == 1]) == {-1}


async def test_a_seeded_agent_draws_new_noise_each_turn_and_episode_and_again_the_same_run(engine, tok):
    """The engine's seed is per request: a seeded agent must not hand every generation the
    config's seed, or every turn of every episode draws the same noise (an unsure policy
    replies alike each turn, and sample j of every task plays the same replies)."""
    seeds = []

    class Seeds(InferenceEngine):
        async def generate(self, prompts, sampling):
            seeds.append(sampling.seed)
            return await engine.generate(prompts, sampling)

        async def update_weights(self, weights):
            raise NotImplementedError

        async def close(self):
            pass

    def play(group):
        agent = Agent(
            Seeds(), tok, AgentConfig(max_turns=3, max_new_tokens=8, sampling=SamplingParams(seed=5))
        )
        return agent.run_episode(Countdown(), {"id": "c", "start": 3}, group_id=group)

    for group in ("a#0", "b#0", "a#0"):
        await play(group)
    a, b, again = seeds[:3], seeds[3:6], seeds[6:]
    assert len(set(a)) == 3 and not set(a) & set(b)
    assert again == a  # reproducible: the same run draws the same samples
    assert [reply for _, reply, _ in engine.calls[6:]] == [reply for _, reply, _ in engine.calls[:3]]


async def test_budgets_end_episodes_as_truncated_with_the_reason(engine, tok):
    cut = await agent_for(engine, tok, max_turns=2).run_episode(Countdown(), {"id": "c", "start": 5})
    assert cut.trajectory.truncation == "max_turns" and not cut.trajectory.terminated
    assert len(cut.trajectory.turns) == 2 and cut.trajectory.outcome_reward == 0.0

    engine.calls.clear()
    tight = agent_for(engine, tok, max_turns=50, max_context_tokens=60)
    ep = await tight.run_episode(Countdown(), {"id": "c", "start": 40})
    assert ep.trajectory.truncation == "context_overflow"
    assert len(ep.trajectory) <= 60
    assert ep.trajectory.turns[-1].observation_ids == []  # the overflowing observation is not kept
    assert all(len(c[0]) + len(c[1]) <= 60 for c in engine.calls)

    short = agent_for(engine, tok, max_turns=50, max_response_tokens=40)
    ep = await short.run_episode(Countdown(), {"id": "c", "start": 40})
    assert ep.trajectory.truncation == "context_overflow"
    assert len(ep.trajectory) - len(ep.trajectory.prompt_ids) <= 40


async def test_an_engine_failure_ends_the_episode_and_returns_the_sandbox(docker_backend, tok):
    class Broken(InferenceEngine):
        async def generate(self, prompts, sampling):
            raise ConnectionError("server went away")

        async def update_weights(self, weights): ...

        async def close(self): ...

    env = gymnasium.make("arborl/Code-v0", backend=docker_backend)  # leases its sandbox at reset
    task = CodeTask(id="fix", problem_statement="Fix it.", repo_files={"a.py": "x = 1\n"})
    try:
        ep = await agent_for(Broken(), tok).run_episode(env, task)
        assert ep.trajectory.truncation == "engine_error" and "server went away" in ep.error
        assert not env.unwrapped.active
        assert not env.unwrapped._holds_resources()  # no lease, nothing parked: the pool has it back
    finally:
        await env.unwrapped.aclose()


async def test_fork_replays_the_prefix_and_both_copies_go_on(engine, tok):
    agent = agent_for(engine, tok, max_turns=6)
    state = await agent.start(Countdown(), {"id": "c", "start": 4})
    await agent.step(state)
    child = await agent.fork(state, Countdown())
    assert child.chat.ids == state.chat.ids and child.trajectory.turns[0] is state.trajectory.turns[0]
    await asyncio.gather(agent.step(state), agent.step(child))
    assert len(state.trajectory.turns) == len(child.trajectory.turns) == 2
    # Two samples of 24 tokens from an untrained model over a 2k vocabulary: never equal.
    assert state.trajectory.turns[1].response_ids != child.trajectory.turns[1].response_ids
    assert child.env.left == state.env.left == 2  # the replayed env is in the same state

    class Drifting(Countdown):
        async def on_reset(self, task):
            msgs = await super().on_reset(task)
            Drifting.resets = getattr(Drifting, "resets", 0) + 1
            return [*msgs[:1], {"role": "user", "content": f"{self.left} left, reset {Drifting.resets}"}]

    drifting = await agent.start(Drifting(), {"id": "c", "start": 4})
    with pytest.raises(ForkMismatch, match="not deterministic"):
        await agent.fork(drifting, Drifting())


@pytest.mark.parametrize("env_id", ["arborl/Code-v0", "arborl/Tool-v0"])
async def test_real_multi_turn_episodes_in_sandboxed_envs_are_token_exact(
    engine, tok, docker_backend, env_id
):
    """The tiny model through the transformers engine, in real envs backed by Docker sandboxes:
    whatever it writes, every turn is recorded exactly as sampled and consumed."""
    env = gymnasium.make(env_id, backend=docker_backend)
    task = CodeTask(
        id="fix", problem_statement="Fix add().", repo_files={"calc.py": "def add(a, b):\n    return a - b\n"}
    )
    tool_task = ToolTask(id="q", question="What is 2 + 2?", answer=4, verifier="numeric")
    agent = agent_for(engine, tok, max_turns=3, max_new_tokens=32)
    try:
        ep = await agent.run_episode(env, task if env_id.endswith("Code-v0") else tool_task)
    finally:
        await env.unwrapped.aclose()
    traj = ep.trajectory
    ids = traj.token_ids()
    assert len(engine.calls) == len(traj.turns) >= 1 and ep.error is None
    for (prompt, response, _), (start, end) in zip(engine.calls, traj.turn_spans(), strict=True):
        assert ids[:start].tolist() == prompt and ids[start:end].tolist() == response
    assert traj.loss_mask().sum() == traj.num_response_tokens
    assert len(ep.infos) == len(traj.turns) + 1 + (traj.truncation == "max_turns")
    assert all(len(t.env_state_hash) == 16 for t in traj.turns)  # the env's state hash, per turn
