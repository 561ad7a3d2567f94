"""Serve concurrent `generate` calls from one in-process model on a worker thread.

Agents call `engine.generate` one episode at a time, concurrently. In-process engines
(transformers, vLLM's offline `LLM`) are blocking and single-threaded, so their calls are
queued and served by one thread; the event loop never blocks, and concurrent episodes share
forward passes. Two ways to serve:

- `BatchRunner` (vLLM's `LLM.generate`): whatever is queued when the worker becomes free runs
  as one batch; every call in it returns when the batch ends.
- `StepRunner` (the transformers engine's decode loop): continuous batching. Between two
  decode steps, queued rows join the running batch (up to `max_rows`) and finished rows
  leave it, each call returning as soon as its own rows are done: an episode that finished
  its turn goes on to its env step while longer replies are still decoding.

Weight updates (`exclusive`) take the model's lock. A batch runner lets them in between
batches. A step runner lets them in between two decode steps (`between_steps`), then goes on
with the new weights: an asynchronous trainer's push costs one decode step of waiting, not
a batch of long-tailed replies. Either way each token records the weights version that
sampled it (`RowResult.versions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .base import EngineError, FinishReason, Generation, SamplingParams


@dataclass(frozen=True)
class Row:
    """One sample to draw: a prompt, its call's sampling params, and this sample's seed."""

    prompt: list[int]
    sampling: SamplingParams
    prompt_index: int
    sample_index: int
    #: the prompt's images (`arborl.agents.vision.ImageInputs`), for engines that take them
    images: Any = None

    @property
    def seed(self) -> int | None:
        return self.sampling.row_seed(self.sample_index)


@dataclass
class RowResult:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    versions: list[int] | None = None  # weights version per token; None: the batch's version
    entropies: list[float] | None = None  # of each token's sampling distribution; None: not reported


def expand_rows(
    prompts: Sequence[list[int]], sampling: SamplingParams, images: Sequence[Any] | None = None
) -> list[Row]:
    """Prompt-major rows ``[p0s0, p0s1, ..., p1s0, ...]`` (with each prompt's `images`)."""
    shown = list(images) if images is not None else [None] * len(prompts)
    return [Row(p, sampling, i, j, shown[i]) for i, p in enumerate(prompts) for j in range(sampling.n)]


def _generations(rows: list[Row], results: list[RowResult], start: float, version: int) -> list[Generation]:
    return [
        Generation(
            prompt_index=r.prompt_index,
            sample_index=r.sample_index,
            token_ids=res.token_ids,
            logprobs=res.logprobs,
            finish_reason=res.finish_reason,
            num_prompt_tokens=len(r.prompt),
            latency_s=time.perf_counter() - start,
            weights_version=res.versions[0] if res.versions else version,
            token_versions=res.versions or [],
            entropies=res.entropies or [],
        )
        for r, res in zip(rows, results, strict=True)
    ]


class _WeightsGate:
    """The model's lock, the weights version, and how updates get in."""

    def __init__(self) -> None:
        # A thread lock, not an asyncio one: the engine may be driven from several event
        # loops over its life (e.g. one per test), and weight updates run in threads too.
        self.lock = threading.Lock()
        self.weights_version = 0
        self._waiting = 0  # updates waiting for the lock
        self._updated = threading.Condition()

    def between_steps(self) -> int:
        """Called by the thread that holds `lock` between two forward passes: if a weight
        update is waiting, step aside until it has run. Returns the weights version now."""
        if self._waiting:
            self.lock.release()
            try:
                with self._updated:
                    self._updated.wait_for(lambda: self._waiting == 0)
            finally:
                self.lock.acquire()
        return self.weights_version

    async def exclusive(self, fn: Callable[[], None]) -> None:
        """Run `fn` in a thread while no forward pass runs, then bump the weights version."""

        def locked() -> None:
            with self._updated:
                self._waiting += 1
            try:
                with self.lock:
                    fn()
                    self.weights_version += 1
            finally:
                with self._updated:
                    self._waiting -= 1
                    self._updated.notify_all()

        await asyncio.to_thread(locked)


class BatchRunner(_WeightsGate):
    """Runs `run_batch(rows) -> results` (blocking) for queued rows, one batch at a time."""

    def __init__(self, run_batch: Callable[[list[Row]], list[RowResult]], max_rows: int) -> None:
        super().__init__()
        self._run_batch = run_batch
        self._max_rows = max(1, max_rows)
        self._pending: list[tuple[list[Row], asyncio.Future[tuple[int, list[RowResult]]]]] = []
        self._drainer: asyncio.Task[None] | None = None

    async def generate(self, rows: list[Row], start: float) -> list[Generation]:
        """Queue `rows`, wait for their batch, and wrap the results."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[int, list[RowResult]]] = loop.create_future()
        self._pending.append((rows, fut))
        if self._drainer is None or self._drainer.done() or self._drainer.get_loop() is not loop:
            self._drainer = loop.create_task(self._drain())
        version, results = await fut
        return _generations(rows, results, start, version)

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


class StepBatch(Protocol):
    """The rows an engine decodes together, one token per row per `step`.

    Each row comes with a `key` that `step` hands back with the row's result."""

    version: int  # the weights its state (KV cache, next-token logits) was computed with

    def __len__(self) -> int: ...

    def admit(self, rows: list[Row], keys: list[Any], version: int) -> None:
        """Add rows (prefill them with the current weights, `version`)."""

    def refresh(self, version: int) -> None:
        """Recompute the state of every row (prompt + tokens so far) with new weights."""

    def retain(self, keep: Callable[[Any], bool]) -> None:
        """Drop the rows whose key fails `keep` (their callers went away)."""

    def step(self) -> list[tuple[Any, RowResult]]:
        """Sample one token per row; return the rows that finished (they leave the batch)."""


@dataclass(eq=False)
class _Request:
    rows: list[Row]
    fut: asyncio.Future[list[RowResult]]
    results: list[RowResult | None] = field(default_factory=list)
    left: int = 0

    def settle(self, results: list[RowResult] | None = None, error: BaseException | None = None) -> None:
        """Resolve the caller's future from any thread (its loop may be closed: ignore)."""

        def set_() -> None:
            if self.fut.done():
                return
            if isinstance(error, StopIteration):
                # a future refuses StopIteration (set_exception raises TypeError in this
                # callback), which would leave the caller waiting for ever
                wrapped = RuntimeError(f"the engine's decode loop raised {error!r}")
                wrapped.__cause__ = error
                self.fut.set_exception(wrapped)
            elif error is not None:
                self.fut.set_exception(error)
            else:
                self.fut.set_result(results or [])

        with contextlib.suppress(RuntimeError):  # the caller's event loop is closed
            self.fut.get_loop().call_soon_threadsafe(set_)


class StepRunner(_WeightsGate):
    """Continuous batching over a `StepBatch` on one decode thread (see the module docstring)."""

    def __init__(self, new_batch: Callable[[], StepBatch], max_rows: int) -> None:
        super().__init__()
        self._new_batch = new_batch
        self._max_rows = max(1, max_rows)
        self._queue: deque[tuple[_Request, int]] = deque()  # (call, row index), in arrival order
        self._mutex = threading.Lock()  # guards _queue, _serving and _thread
        self._serving = False
        self._thread: threading.Thread | None = None
        self._closing = False

    async def generate(self, rows: list[Row], start: float) -> list[Generation]:
        """Queue `rows` and wait until all of them are done."""
        fut: asyncio.Future[list[RowResult]] = asyncio.get_running_loop().create_future()
        req = _Request(rows, fut, [None] * len(rows), len(rows))
        with self._mutex:
            if self._closing:
                raise EngineError("the engine is closed")
            self._queue.extend((req, i) for i in range(len(rows)))
            if not self._serving:
                self._serving = True
                self._thread = threading.Thread(target=self._serve, name="arborl-decode", daemon=True)
                self._thread.start()
        return _generations(rows, await fut, start, self.weights_version)

    async def close(self) -> None:
        """Fail what is queued or decoding and wait for the decode thread to end."""
        with self._mutex:
            self._closing = True
            thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join, 60)

    def _serve(self) -> None:
        batch = self._new_batch()
        admitted: set[_Request] = set()  # calls with rows in the batch
        try:
            with self.lock:
                while True:
                    if self._closing:
                        raise EngineError("the engine was closed while generating")
                    version = self.between_steps()
                    batch.retain(lambda key: not key[0].fut.done())
                    admitted = {req for req in admitted if not req.fut.done()}
                    if len(batch) and batch.version != version:
                        batch.refresh(version)
                    with self._mutex:
                        new = []
                        while self._queue and len(batch) + len(new) < self._max_rows:
                            new.append(self._queue.popleft())
                        if not new and not len(batch):
                            self._serving = False
                            return
                    new = [key for key in new if not key[0].fut.done()]
                    if new:
                        admitted.update(req for req, _ in new)  # before: the prefill may fail
                        batch.admit([req.rows[i] for req, i in new], new, version)
                    if not len(batch):  # what was queued had been cancelled
                        continue
                    for (req, i), result in batch.step():
                        req.results[i] = result
                        req.left -= 1
                        if req.left == 0:
                            admitted.discard(req)
                            req.settle([r for r in req.results if r is not None])
        except BaseException as e:  # fail every call in flight or queued; the next call starts afresh
            with self._mutex:
                failed = {req for req, _ in self._queue} | admitted
                self._queue.clear()
                self._serving = False
            for req in failed:
                req.settle(error=e)
