"""Episodes longer than the window: a sliding window or the policy's own summary, each context a
token-exact segment, and every segment trained with its episode's advantage.

Expected values come from the engine's own records (`Recording`: every prompt it was fed and
every token it sampled, with log-probs), the tokenizer, and verl's GRPO.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from agent_helpers import agent_for
from countdown import Countdown
from pydantic import ValidationError
from transformers import AutoModelForCausalLM
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from arborl.agents import AgentConfig
from arborl.agents.context import SUMMARY_PROMPT, ContextError
from arborl.trainer.local.learner import Learner, LearnerConfig
from arborl.trainer.local.segments import credited_batch

LIMIT = 120  # max_context_tokens


def check_token_exact(segments, calls) -> None:
    """Each segment's turns are the engine's calls, in order: the ids before a turn are the
    prompt the engine was fed, the turn's ids what it sampled, with its log-probs; the loss
    mask is 1 exactly on those sampled ids."""
    calls = iter(calls)
    for s in segments:
        ids, mask, logp = s.token_ids(), s.loss_mask(), s.behavior_logprobs()
        sampled = np.zeros(len(ids), dtype=bool)
        for start, end in s.turn_spans():
            prompt, response, logprobs = next(calls)
            assert ids[:start].tolist() == prompt  # what the engine was fed, token for token
            assert ids[start:end].tolist() == response
            np.testing.assert_allclose(logp[start:end], logprobs, rtol=0, atol=1e-6)
            assert len(prompt) + len(response) <= LIMIT
            sampled[start:end] = True
        assert (mask == sampled).all()  # 1 on sampled ids, 0 on prompt and observations
    assert next(calls, None) is None  # every engine call is in some segment


@pytest.mark.parametrize("mode", ["sliding_window", "summarize"])
async def test_an_episode_three_windows_long_trains_on_token_exact_segments(engine, tok, tiny_model, mode):
    agent = agent_for(engine, tok, max_turns=40, max_context_tokens=LIMIT, context=mode)
    ep = await agent.run_episode(Countdown(), {"id": "c", "start": 14}, group_id="g")
    calls = list(engine.calls)
    segments = ep.segments
    assert ep.trajectory is segments[-1] and ep.trajectory.terminated and ep.error is None
    base = calls[0][0]
    episode_tokens = len(base) + sum(
        len(t.response_ids) + len(t.observation_ids)
        for s in segments
        if not s.metrics.get("summary")
        for t in s.turns
    )
    assert episode_tokens >= 3 * LIMIT  # the episode is three windows long
    check_token_exact(segments, calls)
    assert len({s.episode_id for s in segments}) == 1 and segments[0].episode_id
    assert {s.outcome_reward for s in segments} == {1.0}  # every segment: the episode's reward
    for s in segments:  # every context keeps the opening prompt (system + task) exactly
        assert s.prompt_ids[: len(base)] == base
    summaries = [i for i, s in enumerate(segments) if s.metrics.get("summary")]
    if mode == "summarize":
        assert summaries
        for i in summaries:
            summary = segments[i]
            assert len(summary.turns) == 1 and summary.loss_mask()[len(summary.prompt_ids) :].all()
            assert SUMMARY_PROMPT in tok.decode(summary.prompt_ids)  # the policy was asked for it
            # the episode goes on from the opening prompt + the summary's sampled ids
            after = segments[i + 1].prompt_ids
            assert (
                after[len(base) : len(base) + len(summary.turns[0].response_ids)]
                == summary.turns[0].response_ids
            )
    else:
        assert not summaries and len(segments) >= 3
        for prev, s in itertools.pairwise(segments):
            # the oldest turns were dropped, the newest reply kept as sampled
            last = prev.turns[-1].response_ids
            tail = s.prompt_ids[len(base) :]
            assert any(tail[k : k + len(last)] == last for k in range(len(tail)))

    # one group of two episodes (one solved, one cut short) trains for one step on every segment
    engine.calls.clear()
    cut = await agent_for(engine, tok, max_turns=2, max_context_tokens=LIMIT, context=mode).run_episode(
        Countdown(), {"id": "c", "start": 14}, group_id="g"
    )
    rows = segments + cut.segments
    data = credited_batch(rows, tok.pad_token_id, "grpo")
    expected, _ = compute_grpo_outcome_advantage(  # GRPO over the episodes, one row each
        token_level_rewards=torch.tensor([[1.0], [0.0]]),
        response_mask=torch.ones(2, 1),
        index=np.array(["g", "g"], dtype=object),
    )
    mask = data.batch["response_mask"].bool()
    for row, t in enumerate(rows):
        want = float(expected[0 if t in segments else 1, 0])
        assert torch.allclose(data.batch["advantages"][row][mask[row]], torch.tensor(want))
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    before = [p.detach().clone() for p in model.parameters()]
    metrics = Learner(model, LearnerConfig()).ppo_update(data)
    assert all(np.isfinite(v) for v in metrics.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


async def test_a_window_that_cannot_hold_the_opening_prompt_is_refused_clearly(engine, tok):
    agent = agent_for(engine, tok, max_context_tokens=12, max_new_tokens=4, context="sliding_window")
    with pytest.raises(ContextError, match=r"opening prompt .* is \d+ tokens but max_context_tokens is 12"):
        await agent.run_episode(Countdown(), {"id": "c", "start": 3})
    assert engine.calls == []
    with pytest.raises(ValidationError, match=r"max_new_tokens .* below max_context_tokens"):
        AgentConfig(context="summarize", max_context_tokens=64, max_new_tokens=64)
