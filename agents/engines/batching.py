"""Coalesce concurrent `generate` calls into batches run on a worker thread.

Agents call `engine.generate` one episode at a time, concurrently. In-process engines
(transformers, vLLM's offline `LLM`) are blocking and single-threaded, so calls are queued,
and whatever is queued when the worker becomes free runs as one batch in a thread: the
event loop never blocks, and concurrent episodes share forward passes. Weight updates take
the same lock, so they land between batches, never inside one.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .base import FinishReason, Generation, SamplingParams


@dataclass(frozen=True)
class Row:
    """One sample to draw: a prompt, its call's sampling params, and this sample's seed."""

    prompt: list[int]
    sampling: SamplingParams
    prompt_index: int
    sample_index: int

    @property
    def seed(self) -> int | None:
        return self.sampling.row_seed(self.sample_index)


@dataclass
class RowResult:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason


def expand_rows(prompts: Sequence[list[int]], sampling: SamplingParams) -> list[Row]:
    """Prompt-major rows ``[p0s0, p0s1, ..., p1s0, ...]``."""
    return [Row(p, sampling, i, j) for i, p in enumerate(prompts) for j in range(sampling.n)]


class BatchRunner:
    """Runs `run_batch(rows) -> results` (blocking) for queued rows, one batch at a time."""

    def __init__(self, run_batch: Callable[[list[Row]], list[RowResult]], max_rows: int) -> None:
        self._run_batch = run_batch
        self._max_rows = max(1, max_rows)
        self._pending: list[tuple[list[Row], asyncio.Future[tuple[int, list[RowResult]]]]] = []
        self._drainer: asyncio.Task[None] | None = None
        # A thread lock, not an asyncio one: the engine may be driven from several event
        # loops over its life (e.g. one per test), and weight updates run in threads too.
        self.lock = threading.Lock()
        self.weights_version = 0

    async def generate(self, rows: list[Row], start: float) -> list[Generation]:
        """Queue `rows`, wait for their batch, and wrap the results."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[int, list[RowResult]]] = loop.create_future()
        self._pending.append((rows, fut))
        if self._drainer is None or self._drainer.done() or self._drainer.get_loop() is not loop:
            self._drainer = loop.create_task(self._drain())
        version, results = await fut
        return [
            Generation(
                prompt_index=r.prompt_index,
                sample_index=r.sample_index,
                token_ids=res.token_ids,
                logprobs=res.logprobs,
                finish_reason=res.finish_reason,
                num_prompt_tokens=len(r.prompt),
                latency_s=time.perf_counter() - start,
                weights_version=version,
            )
            for r, res in zip(rows, results, strict=True)
        ]

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # Take whole requests from this loop's queue until the batch is full.
            batch: list[tuple[list[Row], asyncio.Future[tuple[int, list[RowResult]]]]] = []
            size = 0
            for item in list(self._pending):
                if item[1].get_loop() is not loop:
                    continue
                if batch and size + len(item[0]) > self._max_rows:
                    break
                batch.append(item)
                size += len(item[0])
                self._pending.remove(item)
            if not batch:
                return
            rows = [r for req, _ in batch for r in req]
            try:
                version, results = await asyncio.to_thread(self._locked_run, rows)
            except BaseException as e:  # hand the failure to every caller in the batch
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)
                if isinstance(e, asyncio.CancelledError):
                    raise
                continue
            at = 0
            for req, fut in batch:
                if not fut.done():
                    fut.set_result((version, results[at : at + len(req)]))
                at += len(req)

    def _locked_run(self, rows: list[Row]) -> tuple[int, list[RowResult]]:
        with self.lock:
            out: list[RowResult] = []
            for i in range(0, len(rows), self._max_rows):
                out.extend(self._run_batch(rows[i : i + self._max_rows]))
            return self.weights_version, out

    async def exclusive(self, fn: Callable[[], None]) -> None:
        """Run `fn` in a thread with no batch in flight, then bump the weights version."""

        def locked() -> None:
            with self.lock:
                fn()
                self.weights_version += 1

        await asyncio.to_thread(locked)
