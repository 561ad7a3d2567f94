"""The transformers engine on the real tiny model: batched and concurrent sampling, log-probs
against an independent teacher-forced scoring, stop/length handling, and the weight hook.

The reference is a second copy of the model loaded with `from_pretrained` in float64 (not the
engine's own scorer); the engine samples in float32, so log-probs agree to ~1e-6 and are
checked at ``atol=1e-5``.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch
from engine_checks import ATOL, PROMPTS, SHARED, new_policy
from transformers import AutoModelForCausalLM

from arborl.agents.engines import (
    EngineError,
    HFEngineConfig,
    SamplingParams,
    make_engine,
    parse_engine_config,
    score_tokens,
)


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


@pytest.mark.parametrize("prompts", [PROMPTS, SHARED], ids=["distinct", "shared-prefix"])
async def test_batched_samples_carry_the_logprobs_of_teacher_forced_scoring(engine, reference, prompts):
    sampling = SamplingParams(temperature=0.7, max_new_tokens=12, n=2, seed=11, ignore_eos=True)
    out = await engine.generate(prompts, sampling)
    assert [(g.prompt_index, g.sample_index) for g in out] == [(i, j) for i in range(3) for j in range(2)]
    for g in out:
        prompt = prompts[g.prompt_index]
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


async def test_calls_join_a_running_batch_and_return_when_their_own_rows_are_done(engine, reference):
    """Continuous batching: a short call made while a long one decodes joins its batch (a
    KV cache of another width, merged in) and returns first, with exact log-probs."""
    long_started = decode_started(engine)
    long = asyncio.create_task(
        engine.generate([PROMPTS[0]], SamplingParams(temperature=0, max_new_tokens=400, ignore_eos=True))
    )
    await asyncio.to_thread(long_started.wait, 30)
    short = await engine.generate(
        SHARED, SamplingParams(temperature=0.9, max_new_tokens=5, seed=3, ignore_eos=True)
    )
    assert not long.done()
    for g in short:
        expected, _ = plain_logprobs(reference, SHARED[g.prompt_index], g.token_ids, temperature=0.9)
        torch.testing.assert_close(torch.tensor(g.logprobs, dtype=torch.float64), expected, rtol=0, atol=ATOL)
    (g,) = await long
    expected, logits = plain_logprobs(reference, PROMPTS[0], g.token_ids)
    assert len(g.token_ids) == 400 and g.token_ids == logits.argmax(-1).tolist()
    torch.testing.assert_close(torch.tensor(g.logprobs, dtype=torch.float64), expected, rtol=0, atol=ATOL)


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


async def test_an_update_lands_between_decode_steps_and_later_tokens_are_the_new_policys(
    engine, reference, tiny_model
):
    """A push does not wait for the running batch: it lands between two decode steps, the
    engine prefills again with the new weights, and each token records the version that
    sampled it, with that version's exact log-prob (a stale KV cache would not match)."""
    new = AutoModelForCausalLM.from_pretrained(tiny_model)
    state = new_policy(new)
    new.load_state_dict(state)
    new_ref = new.to(torch.float64).eval()

    calls, reached = 0, threading.Event()
    inner = engine.model.forward

    def forward(*args, **kwargs):  # holds the 3rd decode step (token 4's logits) until the push waits
        nonlocal calls
        calls += "attention_mask" in kwargs  # decode steps (prefill calls pass none)
        out = inner(*args, **kwargs)
        if calls == 3 and not reached.is_set():
            reached.set()
            deadline = time.monotonic() + 30
            while not engine._runner._waiting and time.monotonic() < deadline:
                time.sleep(0.001)
        return out

    engine.model.forward = forward
    greedy = SamplingParams(temperature=0, max_new_tokens=12, ignore_eos=True)
    running = asyncio.create_task(engine.generate(SHARED, greedy))
    await asyncio.to_thread(reached.wait, 30)
    await engine.update_weights(state)
    out = await running
    for g in out:
        assert g.weights_version == 0 and g.versions == [0] * 3 + [1] * 9
        prompt = SHARED[g.prompt_index]
        old_lp, old_logits = plain_logprobs(reference, prompt, g.token_ids)
        new_lp, new_logits = plain_logprobs(new_ref, prompt, g.token_ids)
        assert g.token_ids[:3] == old_logits[:3].argmax(-1).tolist()
        assert g.token_ids[3:] == new_logits[3:].argmax(-1).tolist()
        expected = torch.cat([old_lp[:3], new_lp[3:]])
        torch.testing.assert_close(torch.tensor(g.logprobs, dtype=torch.float64), expected, rtol=0, atol=ATOL)
    after = await engine.generate(SHARED, greedy)
    assert all(g.versions == [1] * 12 for g in after)


def decode_started(engine) -> threading.Event:
    """An event set once the engine runs its first decode step (prefill calls pass no mask)."""
    started, inner = threading.Event(), engine.model.forward

    def forward(*args, **kwargs):
        if "attention_mask" in kwargs:
            started.set()
        return inner(*args, **kwargs)

    engine.model.forward = forward
    return started


@pytest.mark.parametrize("where", ["prefill", "decode"])
async def test_a_failing_forward_fails_its_calls_and_the_engine_serves_the_next_ones(
    engine, reference, where
):
    inner, calls = engine.model.forward, 0

    def forward(*args, **kwargs):  # the 3rd prefill pass (of 3 rows) or the 2nd decode step fails
        nonlocal calls
        if ("attention_mask" in kwargs) == (where == "decode"):
            calls += 1
            if calls == (3 if where == "prefill" else 2):
                raise RuntimeError("out of memory (simulated)")
        return inner(*args, **kwargs)

    engine.model.forward = forward
    with pytest.raises(RuntimeError, match="out of memory"):
        await engine.generate(PROMPTS, SamplingParams(max_new_tokens=8, ignore_eos=True))
    out = await engine.generate(PROMPTS, SamplingParams(temperature=0, max_new_tokens=8, ignore_eos=True))
    for g in out:
        expected, logits = plain_logprobs(reference, PROMPTS[g.prompt_index], g.token_ids)
        assert g.token_ids == logits.argmax(-1).tolist()
        torch.testing.assert_close(torch.tensor(g.logprobs, dtype=torch.float64), expected, rtol=0, atol=ATOL)


async def test_closing_fails_the_calls_in_flight_and_refuses_new_ones(engine):
    started = decode_started(engine)
    running = asyncio.create_task(
        engine.generate(PROMPTS, SamplingParams(max_new_tokens=400, ignore_eos=True))
    )
    await asyncio.to_thread(started.wait, 30)
    await engine.close()
    with pytest.raises(EngineError, match="closed while generating"):
        await running
    with pytest.raises(EngineError, match="closed"):
        await engine.generate(PROMPTS, SamplingParams(max_new_tokens=2))


async def test_the_decode_thread_takes_its_own_torch_threads(tiny_model):
    """`torch_threads` is thread-local to the decode thread: a trainer gives the engine and
    the learner, which run at once, a share of the cores each."""
    main = torch.get_num_threads()
    engine = make_engine(HFEngineConfig(model=str(tiny_model), torch_threads=main + 1))
    seen, inner = set(), engine.model.forward

    def forward(*args, **kwargs):
        seen.add(torch.get_num_threads())
        return inner(*args, **kwargs)

    engine.model.forward = forward
    await engine.generate(PROMPTS, SamplingParams(max_new_tokens=3, ignore_eos=True))
    assert seen == {main + 1} and torch.get_num_threads() == main
    await engine.close()


async def test_rows_cancelled_while_queued_are_never_prefilled(tiny_model, reference):
    """A call cancelled while its rows wait for room in the running batch costs nothing: its
    rows are dropped when they reach the head of the queue, not prefilled and decoded for no
    one, and the engine serves the next call."""
    engine = make_engine(HFEngineConfig(model=str(tiny_model), max_batch_size=len(PROMPTS)))
    started, inner = decode_started(engine), engine.model.forward
    prefilled: list[int] = []

    def forward(*args, **kwargs):
        if "attention_mask" not in kwargs:  # a prefill pass (decode steps carry the mask)
            prefilled.append(kwargs["input_ids"].shape[0])
        return inner(*args, **kwargs)

    engine.model.forward = forward
    running = asyncio.create_task(
        engine.generate(PROMPTS, SamplingParams(max_new_tokens=60, ignore_eos=True))
    )
    await asyncio.to_thread(started.wait, 30)
    queued = asyncio.create_task(engine.generate(SHARED, SamplingParams(max_new_tokens=60, ignore_eos=True)))
    await asyncio.sleep(0)  # its rows are queued: the batch is full
    queued.cancel()
    before = list(prefilled)
    assert [len(g.token_ids) for g in await running] == [60] * len(PROMPTS)
    with pytest.raises(asyncio.CancelledError):
        await queued
    out = await engine.generate(PROMPTS[:1], SamplingParams(temperature=0, max_new_tokens=8, ignore_eos=True))
    assert prefilled == [*before, 1]  # after the cancelled call was queued: the next call's row only
    _, logits = plain_logprobs(reference, PROMPTS[0], out[0].token_ids)
    assert out[0].token_ids == logits.argmax(-1).tolist()
    await engine.close()


def test_a_decode_loop_stopiteration_reaches_the_caller():
    """A future refuses StopIteration (set_exception raises TypeError inside the loop's
    callback, and the caller would wait for ever): the request settles with a RuntimeError
    whose cause is it. Seen when a VLM sampled an image placeholder (get_rope_index's
    StopIteration), before the engine took those ids out."""
    from arborl.agents.engines.batching import _Request

    async def run():
        req = _Request(rows=[], fut=asyncio.get_running_loop().create_future())
        threading.Thread(target=req.settle, kwargs={"error": StopIteration()}).start()
        return await asyncio.wait_for(req.fut, 5)

    with pytest.raises(RuntimeError, match="StopIteration") as e:
        asyncio.run(run())
    assert isinstance(e.value.__cause__, StopIteration)
