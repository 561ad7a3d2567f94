"""The gateway's trajectories are the engine's tokens, exactly: the real `openai` client,
the tiny model's transformers engine, the chat template rendered by transformers."""

from __future__ import annotations

import json

import openai
import pytest
from gateway_serving import gateway_at
from scripted_engine import Scripted

pytestmark = pytest.mark.slow


def client(url, eid):
    return openai.OpenAI(base_url=f"{url}/e/{eid}/v1", api_key="EMPTY", max_retries=0)


def echo(message):
    """The assistant message as a harness sends it back."""
    return message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"})


def assert_segment_is_engine_calls(traj, calls):
    """`traj` is these engine calls, token for token: the last prompt + completion, each
    completion a turn with its log-probs, loss mask 1 exactly on the completions."""
    last_prompt, last_completion, _ = calls[-1]
    assert traj.prompt_ids == calls[0][0]
    assert traj.token_ids().tolist() == last_prompt + last_completion
    assert len(traj.turns) == len(calls)
    mask = traj.loss_mask().tolist()
    logprobs = traj.behavior_logprobs().tolist()
    for turn, (prompt, completion, lps) in zip(traj.turns, calls, strict=True):
        assert turn.response_ids == completion and turn.response_logprobs == lps
        assert traj.token_ids().tolist()[: len(prompt)] == prompt  # each prompt extends the last
        span = slice(len(prompt), len(prompt) + len(completion))
        assert mask[span] == [1] * len(completion)
        assert logprobs[span] == pytest.approx(lps, abs=1e-6)  # float32 storage
    assert sum(mask) == sum(len(c) for _, c, _ in calls)


def as_written(messages, calls, tok):
    """`messages` with each assistant reply as the model wrote it (the engine's ids decoded,
    without the stop token, which the template writes itself as <|im_end|>)."""
    replies = iter(calls)
    out = []
    for m in messages:
        if m["role"] == "assistant":
            _, completion, _ = next(replies)
            ids = completion[:-1] if completion[-1] == tok.eos_token_id else completion
            m = {"role": "assistant", "content": tok.decode(ids, skip_special_tokens=False)}
        out.append(m)
    return out


def test_an_append_only_conversation_is_one_token_exact_segment(engine, tok):
    with gateway_at(engine, tok) as (gw, url):
        eid = gw.open_episode(task_id="t")
        c = client(url, eid)
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add 2 and 3."}]
        for k, follow in enumerate(
            [{"role": "tool", "content": "5"}, {"role": "user", "content": "Thanks."}]
        ):
            r = c.chat.completions.create(
                model="tiny", messages=messages, max_tokens=12, seed=k, extra_body={"return_token_ids": True}
            )
            prompt, completion, _ = engine.calls[-1]
            assert r.model_extra["prompt_token_ids"] == prompt
            assert r.choices[0].model_extra["token_ids"] == completion
            assert r.usage.prompt_tokens == len(prompt) and r.usage.completion_tokens == len(completion)
            messages += [echo(r.choices[0].message), follow]
        c.chat.completions.create(model="tiny", messages=messages, max_tokens=12, seed=9)
        (traj,) = gw.end_episode(eid, reward=0.5)
    assert len(engine.calls) == 3
    assert_segment_is_engine_calls(traj, engine.calls)
    assert traj.outcome_reward == 0.5 and traj.task_id == "t"
    # The reference: transformers' own rendering of the conversation.
    rendered = tok.apply_chat_template(as_written(messages, engine.calls, tok), tokenize=False,
                                       add_generation_prompt=True)  # fmt: skip
    assert tok.decode(engine.calls[-1][0], skip_special_tokens=False) == rendered


def test_a_template_that_drops_earlier_thinking_starts_a_second_segment(engine, rewriting_tok):
    tok = rewriting_tok
    with gateway_at(engine, tok) as (gw, url):
        eid = gw.open_episode()
        c = client(url, eid)
        messages = [{"role": "user", "content": "Add 2 and 3."}]
        for k, follow in enumerate([{"role": "tool", "content": "5"}, {"role": "user", "content": "And 4?"}]):
            r = c.chat.completions.create(model="tiny", messages=messages, max_tokens=10, seed=k)
            messages += [echo(r.choices[0].message), follow]
        c.chat.completions.create(model="tiny", messages=messages, max_tokens=10, seed=7)
        first, second = gw.end_episode(eid, reward=1.0)
    calls = engine.calls
    assert_segment_is_engine_calls(first, calls[:2])  # the tool result extends the thinking turn
    assert_segment_is_engine_calls(second, calls[2:])  # the new user message rewrote it
    tail = calls[1][0] + calls[1][1]
    assert calls[2][0][: len(tail)] != tail
    rendered = tok.apply_chat_template(
        as_written(messages, calls, tok), tokenize=False, add_generation_prompt=True
    )
    assert second.prompt_ids == tok.encode(rendered, add_special_tokens=False)
    assert "<think>" not in rendered[: rendered.rindex("<|im_start|>user")]  # the thinking was dropped
    assert first.outcome_reward == second.outcome_reward == 1.0
    assert [t.metrics["segment"] for t in (first, second)] == [0, 1]


def test_streaming_sends_the_recorded_reply(engine, tok):
    with gateway_at(engine, tok) as (gw, url):
        eid = gw.open_episode()
        stream = client(url, eid).chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Count."}],
            max_tokens=16,
            seed=3,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        (traj,) = gw.end_episode(eid, reward=0.0)
    prompt, completion, _ = engine.calls[-1]
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    body = completion[:-1] if completion[-1] == tok.eos_token_id else completion
    assert text == tok.decode(body, skip_special_tokens=False)
    assert finish == ["stop" if body != completion else "length"]
    assert chunks[-1].usage.completion_tokens == len(completion)
    assert traj.token_ids().tolist() == prompt + completion


def test_completions_with_text_or_ids_continue_one_segment(engine, tok):
    with gateway_at(engine, tok) as (gw, url):
        eid = gw.open_episode()
        c = client(url, eid)
        r1 = c.completions.create(model="tiny", prompt="def add(a, b):\n", max_tokens=6, seed=1, logprobs=0)
        p1, c1, lp1 = engine.calls[-1]
        assert r1.choices[0].logprobs.token_logprobs == pytest.approx(lp1)
        r2 = c.completions.create(model="tiny", prompt=p1 + c1 + tok.encode("\n"), max_tokens=6, seed=2)
        text = tok.decode(engine.calls[-1][0] + engine.calls[-1][1], skip_special_tokens=False)
        c.completions.create(model="tiny", prompt=text + "# done\n", max_tokens=6, seed=3)
        (traj,) = gw.end_episode(eid, reward=0.0)
    assert r1.choices[0].text and r2.usage.prompt_tokens == len(p1 + c1) + 1
    assert_segment_is_engine_calls(traj, engine.calls)


ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


def test_tool_calls_come_back_parsed_and_the_echo_keeps_the_models_own_tokens(hf, tok):
    # Compact JSON: the template would re-render this call with spaces, other tokens.
    call = '<tool_call>{"name":"add","arguments":{"a":2,"b":3}}</tool_call>'
    engine = Scripted(hf, tok, [call, "It is 5."])
    with gateway_at(engine, tok, tool_parser="hermes") as (gw, url):
        eid = gw.open_episode()
        c = client(url, eid)
        messages = [{"role": "user", "content": "Add 2 and 3."}]
        r = c.chat.completions.create(model="tiny", messages=messages, tools=[ADD])
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls"
        (tc,) = choice.message.tool_calls
        assert tc.function.name == "add" and json.loads(tc.function.arguments) == {"a": 2, "b": 3}
        messages += [echo(choice.message), {"role": "tool", "tool_call_id": tc.id, "content": "5"}]
        r2 = c.chat.completions.create(model="tiny", messages=messages, tools=[ADD])
        assert r2.choices[0].message.content == "It is 5." and not r2.choices[0].message.tool_calls
        (traj,) = gw.end_episode(eid, reward=1.0)
    assert_segment_is_engine_calls(traj, engine.calls)


def test_replies_that_differ_only_in_their_thinking_are_told_apart(hf, tok):
    engine = Scripted(
        hf, tok, ["<think>\nfirst\n</think>\nSame.", "<think>\nsecond\n</think>\nSame.", "Done."]
    )
    with gateway_at(engine, tok) as (gw, url):
        eid = gw.open_episode()
        c = client(url, eid)
        messages = [{"role": "user", "content": "Go."}]
        for follow in ("Again.", "Last."):
            r = c.chat.completions.create(model="tiny", messages=messages)
            assert r.choices[0].message.content == "Same."
            messages += [
                r.choices[0].message.model_dump(exclude_none=True),
                {"role": "user", "content": follow},
            ]
        c.chat.completions.create(model="tiny", messages=messages)
        (traj,) = gw.end_episode(eid, reward=1.0)  # each echo restored to its own thinking
    assert_segment_is_engine_calls(traj, engine.calls)
