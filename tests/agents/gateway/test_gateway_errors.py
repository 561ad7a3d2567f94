"""Bad input to the gateway: OpenAI-style errors with clear messages, nothing recorded lost,
concurrent episodes kept apart. The real `openai` client and raw HTTP (httpx) against the
gateway in front of the tiny model."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
import openai
import pytest
from gateway_serving import ADMIN, gateway_at

from arborl.agents.engines import OpenAIEngineConfig, make_engine

pytestmark = pytest.mark.slow
HELLO = [{"role": "user", "content": "Hello."}]


def client(url, eid):
    return openai.OpenAI(base_url=f"{url}/e/{eid}/v1", api_key="EMPTY", max_retries=0)


def test_malformed_requests_get_openai_errors_and_lose_nothing(engine, tok):
    with gateway_at(engine, tok, max_context_tokens=64) as (gw, url):
        eid = gw.open_episode()
        c = client(url, eid)
        c.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4, seed=0)
        bad = [
            ({"messages": []}, "messages: List should have at least 1 item"),
            ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role must be one of"),
            ({"messages": HELLO, "n": 2}, "n must be 1"),
            (
                {"messages": HELLO, "temperature": -1},
                "temperature: Input should be greater than or equal to 0",
            ),
            ({"messages": HELLO, "stop": ["\n"]}, "stop strings are not supported"),
            ({"messages": HELLO, "tool_choice": "required"}, "tool_choice must be 'auto' or 'none'"),
            ({"messages": HELLO, "max_tokens": 100}, "maximum context length is 64 tokens"),
            ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "only text content parts"),
        ]
        for body, message in bad:
            with pytest.raises(openai.BadRequestError, match=message.replace("[", r"\[").replace("]", r"\]")):
                c.chat.completions.create(model="tiny", **body)
        with pytest.raises(openai.BadRequestError, match=r"token ids outside \[0, 2048\)"):
            c.completions.create(model="tiny", prompt=[1, 99999], max_tokens=2)
        raw = httpx.post(f"{url}/e/{eid}/v1/chat/completions", content=b"{not json", timeout=30)
        assert raw.status_code == 400
        assert raw.json()["error"]["type"] == "invalid_request_error"
        assert "invalid request" in raw.json()["error"]["message"]
        missing = httpx.post(f"{url}/v1/chat/completion", json={}, timeout=30)  # a typo in the route
        assert missing.status_code == 404 and "/v1/chat/completions" in missing.json()["error"]["message"]
        (traj,) = gw.end_episode(eid, reward=1.0)
    assert len(engine.calls) == 1  # no bad request reached the engine
    prompt, completion, _ = engine.calls[0]
    assert traj.token_ids().tolist() == prompt + completion and len(traj.turns) == 1


def test_an_oversized_body_is_refused_before_it_is_read(engine, tok):
    with gateway_at(engine, tok, max_request_bytes=4096) as (gw, url):
        eid = gw.open_episode()
        big = [{"role": "user", "content": "x" * 10_000}]
        with pytest.raises(openai.APIStatusError, match="larger than this gateway takes") as err:
            client(url, eid).chat.completions.create(model="tiny", messages=big)
        assert err.value.status_code == 413 and gw.trajectories(eid) == []


def test_a_chunked_body_without_a_length_is_cut_off_at_the_limit(engine, tok):
    """A body sent in chunks declares no Content-Length: the limit counts what arrives."""
    JSON = {"content-type": "application/json"}
    with gateway_at(engine, tok, max_request_bytes=4096) as (gw, url):
        eid = gw.open_episode()
        body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "x" * 10_000}]}).encode()

        def chunks():
            for i in range(0, len(body), 1000):
                yield body[i : i + 1000]

        raw = httpx.post(f"{url}/e/{eid}/v1/chat/completions", content=chunks(), headers=JSON, timeout=30)
        assert "content-length" not in raw.request.headers
        assert raw.status_code == 413 and "larger than this gateway takes" in raw.json()["error"]["message"]
        small = json.dumps({"model": "tiny", "messages": HELLO, "max_tokens": 4}).encode()
        ok = httpx.post(f"{url}/e/{eid}/v1/chat/completions", content=iter([small]), headers=JSON, timeout=30)
        assert ok.status_code == 200, ok.text
        assert len(gw.trajectories(eid)[0].turns) == 1  # only the small one reached the engine


def test_unknown_missing_and_ended_episodes_are_refused(engine, tok):
    with gateway_at(engine, tok) as (gw, url):
        with pytest.raises(openai.NotFoundError, match="episode 'nope' is not open on this gateway"):
            client(url, "nope").chat.completions.create(model="tiny", messages=HELLO)
        anonymous = httpx.post(f"{url}/v1/chat/completions", json={"messages": HELLO}, timeout=30)
        assert anonymous.status_code == 401
        assert "no episode id" in anonymous.json()["error"]["message"]
        eid = gw.open_episode()
        client(url, eid).chat.completions.create(model="tiny", messages=HELLO, max_tokens=4, seed=1)
        (traj,) = gw.end_episode(eid, reward=0.25)
        with pytest.raises(openai.ConflictError, match=r"has ended.*new episode id"):
            client(url, eid).chat.completions.create(model="tiny", messages=HELLO, max_tokens=4)
        with pytest.raises(openai.ConflictError, match="has ended"):
            openai.OpenAI(base_url=f"{url}/v1", api_key=eid, max_retries=0).completions.create(
                model="tiny", prompt="x", max_tokens=2
            )
    assert len(engine.calls) == 1 and traj.outcome_reward == 0.25
    assert traj.token_ids().tolist() == engine.calls[0][0] + engine.calls[0][1]


def test_admin_routes_need_the_admin_token(engine, tok):
    with gateway_at(engine, tok) as (gw, url):
        eid = gw.open_episode()
        for auth in (None, f"Bearer {eid}", "Bearer wrong"):  # a harness knows its episode id, not more
            headers = {"Authorization": auth} if auth else {}
            r = httpx.post(f"{url}/admin/episodes/{eid}/end", json={"reward": 1}, headers=headers, timeout=30)
            assert r.status_code == 403 and "admin token" in r.json()["error"]["message"]
        admin = {"Authorization": f"Bearer {ADMIN}"}
        opened = httpx.post(f"{url}/admin/episodes", json={"task_id": "t9"}, headers=admin, timeout=30).json()
        c = openai.OpenAI(base_url=f"{url}{opened['path']}", api_key="EMPTY", max_retries=0)
        c.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4, seed=2)
        ended = httpx.post(
            f"{url}/admin/episodes/{opened['episode_id']}/end",
            json={"reward": 2.0},
            headers=admin,
            timeout=30,
        )
        (traj,) = ended.json()["trajectories"]
    prompt, completion, _ = engine.calls[0]
    assert traj["prompt_ids"] == prompt and traj["turns"][0]["response_ids"] == completion
    assert traj["outcome_reward"] == 2.0 and traj["task_id"] == "t9"


def test_a_failing_engine_is_a_server_error_naming_it(tok):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # released: nothing listens there
    engine = make_engine(OpenAIEngineConfig(base_url=f"http://127.0.0.1:{port}", model="m", max_retries=0))
    with gateway_at(engine, tok) as (gw, url):
        eid = gw.open_episode()
        with pytest.raises(openai.InternalServerError, match=f"engine failed: no answer from .*:{port}"):
            client(url, eid).chat.completions.create(model="tiny", messages=HELLO, max_tokens=2)
        assert gw.end_episode(eid, reward=0.0) == []


async def test_concurrent_episodes_never_mix(engine, tok):
    """Six harnesses at once, their episode ids carried three ways, three turns each."""
    with gateway_at(engine, tok) as (gw, url):
        eids = [gw.open_episode() for _ in range(6)]

        def carrier(i, eid):
            if i % 3 == 0:
                return openai.AsyncOpenAI(base_url=f"{url}/e/{eid}/v1", api_key="EMPTY", max_retries=0)
            if i % 3 == 1:
                return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=eid, max_retries=0)
            return openai.AsyncOpenAI(
                base_url=f"{url}/v1",
                api_key="EMPTY",
                max_retries=0,
                default_headers={"X-Arborl-Episode": eid},
            )

        async def harness(i, eid):
            c = carrier(i, eid)
            messages = [{"role": "user", "content": f"Episode number {i}."}]
            for turn in range(3):
                r = await c.chat.completions.create(model="tiny", messages=messages, max_tokens=6, seed=turn)
                messages += [
                    r.choices[0].message.model_dump(exclude_none=True),
                    {"role": "user", "content": f"go {i}"},
                ]
            await c.close()

        await asyncio.gather(*(harness(i, eid) for i, eid in enumerate(eids)))
        ended = [gw.end_episode(eid, reward=float(i)) for i, eid in enumerate(eids)]
    by_prompt = {tuple(p): (p, c, lp) for p, c, lp in engine.calls}
    assert len(engine.calls) == 18
    for i, trajs in enumerate(ended):
        (traj,) = trajs
        text = tok.decode(traj.token_ids().tolist())
        assert f"Episode number {i}." in text and all(
            f"Episode number {j}." not in text for j in range(6) if j != i
        )
        assert len(traj.turns) == 3 and traj.outcome_reward == float(i)
        prompt = traj.prompt_ids
        for turn in traj.turns:  # every turn is an engine call of this episode, in order
            p, c, lp = by_prompt[tuple(prompt)]
            assert turn.response_ids == c and turn.response_logprobs == lp
            prompt = p + c + turn.observation_ids
