"""The transformers engine on the real tiny model: batched and concurrent sampling, log-probs
against an independent teacher-forced scoring, stop/length handling, and the weight hook.

The reference is a second copy of the model loaded with `from_pretrained` in float64 (not the
engine's own scorer); the engine samples in float32, so log-probs agree to ~1e-6 and are
checked at ``atol=1e-5``.
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM

from arborl.agents.engines import (
    EngineError,
    HFEngineConfig,
    SamplingParams,
    make_engine,
    parse_engine_config,
    score_tokens,
)

ATOL = 1e-5  # float32 sampling vs float64 teacher forcing
PROMPTS = [[1, 5, 9, 200, 33, 7, 91], [7, 8, 9], [300, 4, 4, 4, 12]]  # unequal: left padding is exercised


@pytest.fixture(scope="module")
def reference(tiny_model):
    """The same checkpoint, loaded independently, in float64."""
    return AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float64).eval()


@pytest.fixture
def engine(tiny_model):
    return make_engine(HFEngineConfig(model=str(tiny_model)))


def plain_logprobs(model, prompt, response, temperature=1.0):
    """``log_softmax(logits / T)`` of each response token, teacher-forced (the RL default)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1]
    lp = (logits / temperature).log_softmax(-1)
    return lp.gather(1, torch.tensor(response).unsqueeze(1)).squeeze(1), logits


def new_policy(model, seed=0):
    """Weights of a clearly different policy: perturbed MLPs (the argmax moves) and a larger
    final-norm gain (every logit scaled up: a peaked distribution, unlike the untrained one)."""
    gen = torch.Generator().manual_seed(seed)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for name, value in state.items():
        if ".mlp." in name:
            value += 0.3 * torch.randn(value.shape, generator=gen, dtype=value.dtype)
    state["model.norm.weight"] *= 6.0
    return state


async def test_batched_samples_carry_the_logprobs_of_teacher_forced_scoring(engine, reference):
    sampling = SamplingParams(temperature=0.7, max_new_tokens=12, n=2, seed=11, ignore_eos=True)
    out = await engine.generate(PROMPTS, sampling)
    assert [(g.prompt_index, g.sample_index) for g in out] == [(i, j) for i in range(3) for j in range(2)]
    for g in out:
        prompt = PROMPTS[g.prompt_index]
        assert g.num_prompt_tokens == len(prompt) and g.finish_reason == "length"
        assert len(g.token_ids) == 12 and g.weights_version == 0
        expected, _ = plain_logprobs(reference, prompt, g.token_ids, temperature=0.7)
        torch.testing.assert_close(torch.tensor(g.logprobs, dtype=torch.float64), expected, rtol=0, atol=ATOL)
    # two samples of one prompt are drawn with seeds 11 and 12: different sequences
    assert out[0].token_ids != out[1].token_ids


async def test_greedy_follows_the_argmax_and_reports_temperature_one_logprobs(engine, reference):
    out = await engine.generate(PROMPTS, SamplingParams(temperature=0, max_new_tokens=10, ignore_eos=True))
    for g in out:
        prompt = PROMPTS[g.prompt_index]
        expected, logits = plain_logprobs(reference, prompt, g.token_ids)
        assert g.token_ids == logits.argmax(-1).tolist()
        torch.testing.assert_close(torch.tensor(g.logprobs, dtype=torch.float64), expected, rtol=0, atol=ATOL)


async def test_top_k_top_p_logprobs_are_of_the_renormalised_distribution(engine, reference):
    sampling = SamplingParams(
        temperature=0.9, top_k=40, top_p=0.8, max_new_tokens=10, seed=3, ignore_eos=True
    )
    for g in await engine.generate(PROMPTS, sampling):
        prompt = PROMPTS[g.prompt_index]
        full, _ = plain_logprobs(reference, prompt, g.token_ids, temperature=0.9)
        filtered = score_tokens(reference, prompt, g.token_ids, 0.9, 40, 0.8)
        got = torch.tensor(g.logprobs, dtype=torch.float64)
        torch.testing.assert_close(got, filtered, rtol=0, atol=ATOL)
        # the kept set has mass < 1 (<= 0.8 + one token), so every log-prob rose by -log(mass) > 0
        assert (got - full > 0.1).all()


async def test_concurrent_calls_batch_together_without_changing_seeded_results(engine):
    sampling = [SamplingParams(temperature=1.0, max_new_tokens=8, seed=s, ignore_eos=True) for s in (1, 2, 3)]
    alone = [(await engine.generate([p], s))[0] for p, s in zip(PROMPTS, sampling, strict=True)]
    together = await asyncio.gather(
        *(engine.generate([p], s) for p, s in zip(PROMPTS, sampling, strict=True))
    )
    for a, (t,) in zip(alone, together, strict=True):
        assert a.token_ids == t.token_ids
        torch.testing.assert_close(a.logprobs, t.logprobs, rtol=0, atol=ATOL)


async def test_stop_ids_end_a_response_and_are_kept(engine):
    greedy = SamplingParams(temperature=0, max_new_tokens=8, ignore_eos=True)
    (full,) = await engine.generate([PROMPTS[0]], greedy)
    stop = full.token_ids[3]
    cut_at = full.token_ids.index(stop)
    (cut,) = await engine.generate([PROMPTS[0]], greedy.model_copy(update={"stop_token_ids": (stop,)}))
    assert cut.finish_reason == "stop" and cut.token_ids == full.token_ids[: cut_at + 1]
    assert cut.logprobs == pytest.approx(full.logprobs[: cut_at + 1], abs=ATOL)


async def test_bad_requests_get_clear_errors(engine, tiny_model):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        await engine.generate([[1], []], SamplingParams())
    with pytest.raises(ValueError, match="outside"):
        await engine.generate([[engine.vocab_size]], SamplingParams())
    with pytest.raises(ValueError, match="exceeds"):
        await engine.generate([[1]], SamplingParams(max_new_tokens=engine.max_positions))
    with pytest.raises(ValueError, match="unknown engine type"):
        make_engine(HFEngineConfig.model_construct(type="nope", model=str(tiny_model)))
    assert parse_engine_config({"type": "openai", "model": "m"}).base_url.startswith("http://127.0.0.1")


async def test_pushed_weights_take_effect_and_match_the_new_model(engine, reference, tiny_model, tmp_path):
    greedy = SamplingParams(temperature=0, max_new_tokens=10, ignore_eos=True)
    before = await engine.generate(PROMPTS, greedy)

    new = AutoModelForCausalLM.from_pretrained(tiny_model)
    new.load_state_dict(new_policy(new))
    new.save_pretrained(tmp_path)
    new_ref = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float64).eval()

    await engine.update_weights(str(tmp_path))  # a checkpoint directory, as the trainer saves it
    after = await engine.generate(PROMPTS, greedy)
    assert any(a.token_ids != b.token_ids for a, b in zip(after, before, strict=True))
    for g in after:
        assert g.weights_version == 1
        expected, logits = plain_logprobs(new_ref, PROMPTS[g.prompt_index], g.token_ids)
        assert g.token_ids == logits.argmax(-1).tolist()
        torch.testing.assert_close(torch.tensor(g.logprobs, dtype=torch.float64), expected, rtol=0, atol=ATOL)
    assert engine.score(PROMPTS[0], after[0].token_ids).tolist() == pytest.approx(
        after[0].logprobs, abs=ATOL
    )  # the engine's own scorer follows the update too

    original = {k: v.float() for k, v in reference.state_dict().items()}  # float64 of float32: exact
    await engine.update_weights(original)  # an in-memory state dict
    back = await engine.generate(PROMPTS, greedy)
    assert [g.token_ids for g in back] == [g.token_ids for g in before] and back[0].weights_version == 2

    with pytest.raises(EngineError, match="not in the model"):
        await engine.update_weights({"no.such.weight": torch.zeros(1)})
    with pytest.raises(EngineError, match="shape"):
        await engine.update_weights({"model.norm.weight": torch.zeros(3)})
