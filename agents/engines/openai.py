"""OpenAI-compatible HTTP engine: a vLLM (or SGLang) server's ``/v1/completions``.

Token ids both ways, nothing re-tokenized: the prompt is sent as a list of ids, and the
request asks vLLM for ``return_token_ids`` (the sampled ids) and
``return_tokens_as_token_ids`` (logprob entries keyed ``"token_id:N"``), with
``logprobs=0`` (the sampled token's log-prob only) and ``detokenize``-independent fields.
A response without ids is an error, never decoded text.

The server must report arborl's log-prob convention (see `base`): start vLLM with
``--logprobs-mode processed_logprobs``. The first `generate` probes this (one ``top_k=1``
sample, whose processed log-prob is exactly 0) and raises `EngineError` if the server
reports raw log-probs.

Failures: connection errors, timeouts and 5xx are retried `max_retries` times with
exponential backoff; then a connection failure raises `EngineUnavailable` naming the URL.
4xx responses raise `EngineError` with the server's message at once.

Weights (`update_weights`): vLLM servers started with ``VLLM_SERVER_DEV_MODE=1`` expose
``/collective_rpc``; the engine calls the workers' ``reload_weights(weights_path=...)``
and then ``/reset_prefix_cache``. SGLang servers get ``/update_weights_from_disk``
(untested here: no SGLang build for CPU). A state dict is staged as safetensors in
`weight_sync_dir`, which the server must be able to read (same host or shared storage).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from .base import (
    EngineError,
    EngineUnavailable,
    Generation,
    InferenceEngine,
    SamplingParams,
    WeightsSource,
    check_prompts,
)
from .config import OpenAIEngineConfig
from .weights import save_state_dict, staging_dir

_RETRY_STATUS = {500, 502, 503, 504}


def _token_id(entry: str) -> int:
    if not entry.startswith("token_id:"):
        raise EngineError(
            f"logprob token {entry!r} is not an id: the server ignored return_tokens_as_token_ids"
        )
    return int(entry.removeprefix("token_id:"))


def parse_choice(choice: dict[str, Any]) -> tuple[list[int], list[float], str]:
    """(token ids, their log-probs, finish reason) of one completions choice, ids checked twice."""
    lp = choice.get("logprobs") or {}
    logprobs = lp.get("token_logprobs")
    ids = choice.get("token_ids")
    tokens = lp.get("tokens")
    if ids is None and tokens is not None:
        ids = [_token_id(t) for t in tokens]
    if ids is None or logprobs is None:
        raise EngineError(
            "the server returned no token ids or no log-probs; it must support vLLM's "
            "return_token_ids / return_tokens_as_token_ids and logprobs (arborl never re-tokenizes text)"
        )
    if tokens is not None and [_token_id(t) for t in tokens] != list(ids):
        raise EngineError("token_ids and the logprob tokens disagree in the server's response")
    if len(ids) != len(logprobs) or any(v is None for v in logprobs):
        raise EngineError(f"{len(ids)} ids but {len(logprobs)} log-probs (or missing ones) in the response")
    reason = choice.get("finish_reason")
    if reason not in ("stop", "length"):
        raise EngineError(f"the server finished a request with {reason!r}")
    return [int(t) for t in ids], [float(v) for v in logprobs], str(reason)


class _LoopState:
    """Per-event-loop resources: an httpx client and the gate between requests and updates."""

    def __init__(self, cfg: OpenAIEngineConfig) -> None:
        headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        self.client = httpx.AsyncClient(
            base_url=cfg.base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(cfg.request_timeout_s, connect=cfg.connect_timeout_s),
            limits=httpx.Limits(max_connections=cfg.max_concurrency),
        )
        self.slots = asyncio.Semaphore(cfg.max_concurrency)
        self.idle = asyncio.Condition()
        self.in_flight = 0
        self.updating = False


class OpenAIEngine(InferenceEngine):
    """Sampling through an OpenAI-compatible server; one HTTP request per prompt (``n`` samples)."""

    kind = "openai"

    def __init__(self, config: OpenAIEngineConfig) -> None:
        self.config = config
        self.weights_version = 0
        self._state: _LoopState | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._mode_checked = False

    def _loop_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        if self._state is None or self._loop is not loop:
            self._state, self._loop = _LoopState(self.config), loop
        return self._state

    async def _post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """POST with retries; returns the decoded JSON (None for an empty body)."""
        cfg, client = self.config, self._loop_state().client
        last: Exception | None = None
        for attempt in range(cfg.max_retries + 1):
            if attempt:
                await asyncio.sleep(cfg.backoff_s * 2 ** (attempt - 1))
            try:
                resp = await client.post(path, json=body or {})
            except (httpx.TransportError, httpx.TimeoutException) as e:
                last = e
                continue
            if resp.status_code in _RETRY_STATUS:
                last = EngineError(f"{path}: HTTP {resp.status_code}: {resp.text[:500]}")
                continue
            if resp.status_code >= 400:
                raise EngineError(f"{cfg.base_url}{path}: HTTP {resp.status_code}: {resp.text[:1000]}")
            return resp.json() if resp.content else None
        if isinstance(last, httpx.TransportError | httpx.TimeoutException):
            raise EngineUnavailable(
                f"no answer from {cfg.base_url}{path} after {cfg.max_retries + 1} attempts "
                f"({type(last).__name__}: {last}). Is the server running and reachable? e.g. "
                f"python -m vllm.entrypoints.openai.api_server --model PATH --served-model-name "
                f"{cfg.model} --logprobs-mode processed_logprobs"
            ) from last
        raise EngineError(f"{cfg.base_url}{path} kept failing after {cfg.max_retries + 1} attempts: {last}")

    def _body(self, prompt: list[int], s: SamplingParams, **extra: Any) -> dict[str, Any]:
        return {
            "model": self.config.model,
            "prompt": prompt,
            "n": s.n,
            "max_tokens": s.max_new_tokens,
            "temperature": s.temperature,
            "top_p": 1.0 if s.greedy else s.top_p,
            "top_k": 0 if s.greedy else s.top_k,
            "seed": s.seed,
            "stop_token_ids": list(s.stop_token_ids),
            "ignore_eos": s.ignore_eos,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            "stream": False,
        } | extra

    async def check_logprobs_mode(self) -> None:
        """Raise `EngineError` unless the server reports processed log-probs.

        One token is sampled with ``top_k=1``: after filtering, the only kept token has
        probability 1, so a server in ``processed_logprobs`` mode reports log-prob 0 for it,
        while raw log-probs are ``log p(argmax) < 0`` for any model that is not already
        deterministic. (Comparing two temperatures instead fails on near-uniform models,
        e.g. an untrained one, whose log-probs barely move with temperature.)
        """
        body = self._body([1, 2], SamplingParams(temperature=1.0, top_k=1, max_new_tokens=1, seed=0))
        out = await self._post("/v1/completions", body)
        _, logprobs, _ = parse_choice(out["choices"][0])
        if abs(logprobs[0]) > 1e-6:
            raise EngineError(
                f"{self.config.base_url} reports unprocessed log-probs (log-prob {logprobs[0]:.4g} for "
                "a top_k=1 sample, 0 expected); restart it with --logprobs-mode processed_logprobs "
                "so log-probs match the trainer's scoring"
            )
        self._mode_checked = True

    async def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        start = time.perf_counter()
        checked = check_prompts(prompts)
        state = self._loop_state()
        async with state.idle:
            await state.idle.wait_for(lambda: not state.updating)
            state.in_flight += 1
        try:
            if not self._mode_checked and self.config.server == "vllm":
                await self.check_logprobs_mode()
            version = self.weights_version
            results = await asyncio.gather(
                *(self._one(i, p, sampling, start, version) for i, p in enumerate(checked))
            )
        finally:
            async with state.idle:
                state.in_flight -= 1
                state.idle.notify_all()
        return [g for gens in results for g in gens]

    async def _one(
        self, index: int, prompt: list[int], s: SamplingParams, start: float, version: int
    ) -> list[Generation]:
        async with self._loop_state().slots:
            out = await self._post("/v1/completions", self._body(prompt, s))
        choices = sorted(out.get("choices", []), key=lambda c: c.get("index", 0))
        if len(choices) != s.n:
            raise EngineError(f"asked for {s.n} samples, the server returned {len(choices)}")
        gens = []
        for j, choice in enumerate(choices):
            ids, lps, reason = parse_choice(choice)
            gens.append(
                Generation(
                    prompt_index=index,
                    sample_index=j,
                    token_ids=ids,
                    logprobs=lps,
                    finish_reason="stop" if reason == "stop" else "length",
                    num_prompt_tokens=len(prompt),
                    latency_s=time.perf_counter() - start,
                    weights_version=version,
                )
            )
        return gens

    async def update_weights(self, weights: WeightsSource) -> None:
        """Make the server reload weights (waits for this engine's requests in flight)."""
        state = self._loop_state()
        async with state.idle:
            await state.idle.wait_for(lambda: state.in_flight == 0 and not state.updating)
            state.updating = True
        staged: Path | None = None
        try:
            if isinstance(weights, str | Path):
                directory = Path(weights)
            else:
                staged = directory = staging_dir(self.config.weight_sync_dir)
                await asyncio.to_thread(save_state_dict, dict(weights), staged)
            await self._reload(str(directory.resolve()))
            self.weights_version += 1
        finally:
            if staged is not None:
                shutil.rmtree(staged, ignore_errors=True)
            async with state.idle:
                state.updating = False
                state.idle.notify_all()

    async def _reload(self, directory: str) -> None:
        if self.config.server == "sglang":
            await self._post("/update_weights_from_disk", {"model_path": directory})
            return
        try:
            await self._post(
                "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": directory}}
            )
        except EngineError as e:
            if "HTTP 404" in str(e):
                raise EngineError(
                    "the vLLM server has no /collective_rpc: start it with VLLM_SERVER_DEV_MODE=1 "
                    "to let the trainer push weights"
                ) from e
            raise
        await self._post("/reset_prefix_cache")

    async def close(self) -> None:
        """Close the HTTP client (the server keeps running: it is not ours)."""
        if self._state is not None:
            state, self._state = self._state, None
            if self._loop is asyncio.get_running_loop():
                await state.client.aclose()
