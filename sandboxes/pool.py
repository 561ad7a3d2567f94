"""`SandboxPool`: warm sandboxes per spec, bounded, reset in place between episodes.

    async with SandboxPool(backend, PoolConfig(max_size=8)) as pool:
        async with pool.acquire(spec) as sb:
            await sb.exec("pytest -q")

- Bounded: at most `max_size` sandboxes exist; further acquires wait in FIFO order up to
  `acquire_timeout_s`, then raise `PoolTimeout`. An idle sandbox of another spec is evicted
  to make room before anyone waits.
- Fast reuse: release kills what the episode left running and restores the snapshot in
  place (`Sandbox.reset`, milliseconds) in the background; the releaser does not wait.
- Self-healing: a sandbox that crashed, fails its reset, or fails a health check is
  destroyed and replaced; `min_idle` warm sandboxes per spec are kept topped up.
- No leaks: every sandbox the pool made is tracked until it is destroyed, so `close()`
  removes it whatever it is doing (idle, lent, mid-reset, being created, crashed);
  sandboxes are labelled with this process as owner, and `start()` reaps the orphans of
  dead owners (e.g. a harness killed with SIGKILL).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .base import Sandbox, SandboxBackend, SandboxSpec
from .errors import PoolClosed, PoolTimeout, SandboxCrashed
from .latency import LatencyStats

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def lend(pool: Any, spec: SandboxSpec | None, timeout: float | None) -> AsyncIterator[Any]:
    """checkout → use → checkin, the sandbox marked broken when it crashed: how every pool
    (this one, `RaySandboxPool`) lends a sandbox through `acquire`."""
    sb = await pool.checkout(spec or SandboxSpec(), timeout)
    failed: BaseException | None = None
    try:
        yield sb
    except BaseException as e:
        failed = e
        raise
    finally:
        pool.checkin(sb, broken=isinstance(failed, SandboxCrashed))


class PoolConfig(BaseModel):
    """Pool settings: the `pool` section of the Hydra config is these defaults (cli/config.py)."""

    model_config = ConfigDict(extra="forbid")

    # 4: what every `arborl` command has run with (it was written in the CLI's YAML, and 8 here)
    max_size: int = Field(4, ge=1, description="most sandboxes alive at once, over all specs")
    min_idle: int = Field(0, ge=0, description="warm sandboxes kept ready per spec once it was used")
    acquire_timeout_s: float = Field(300.0, gt=0, description="wait for a free sandbox before PoolTimeout")
    health_interval_s: float = Field(30.0, description="ping idle sandboxes this often (0 = never)")
    max_uses: int = Field(0, ge=0, description="recreate a sandbox after this many episodes (0 = never)")
    reap_on_start: bool = Field(True, description="remove orphaned sandboxes of dead harnesses at start")


class SandboxPool:
    def __init__(self, backend: SandboxBackend, config: PoolConfig | None = None) -> None:
        self.backend = backend
        self.config = config or PoolConfig()
        self.id = uuid.uuid4().hex[:12]
        self.metrics = LatencyStats()
        self._idle: defaultdict[str, deque[Sandbox]] = defaultdict(deque)
        self._specs: dict[str, SandboxSpec] = {}
        self._in_use: set[Sandbox] = set()
        self._alive: set[Sandbox] = set()  # every sandbox made and not yet destroyed
        self._uses: dict[str, int] = {}
        self._total = 0  # alive + being created
        self._cond = asyncio.Condition()
        self._tasks: set[asyncio.Task[None]] = set()
        self._health: asyncio.Task[None] | None = None
        self._closed = False
        self._started = False

    # ---- lifecycle ----------------------------------------------------------------------
    async def start(self) -> SandboxPool:
        if self._started:
            return self
        self._started = True
        if self.config.reap_on_start:
            reaped = await asyncio.to_thread(self.backend.reap)
            if reaped:
                log.info("reaped %d orphaned sandboxes", len(reaped))
        if self.config.health_interval_s > 0:
            self._health = self._spawn(self._health_loop())
        return self

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        everything = self._alive | {sb for q in self._idle.values() for sb in q} | self._in_use
        self._idle.clear()
        self._in_use.clear()
        self._alive.clear()
        await asyncio.gather(*(sb.close() for sb in everything), return_exceptions=True)
        self._total = 0
        async with self._cond:
            self._cond.notify_all()

    async def __aenter__(self) -> SandboxPool:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---- acquire / release --------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def acquire(
        self, spec: SandboxSpec | None = None, timeout: float | None = None
    ) -> AsyncIterator[Sandbox]:
        """Lend a ready sandbox for `spec`; it is reset and returned to the pool on exit."""
        async with lend(self, spec, timeout) as sb:
            yield sb

    async def checkout(self, spec: SandboxSpec, timeout: float | None = None) -> Sandbox:
        """Take a sandbox out of the pool; pair with `checkin`. Prefer `acquire`."""
        if self._closed:
            raise PoolClosed("pool is closed")
        if not self._started:
            await self.start()
        key = spec.key()
        self._specs[key] = spec
        start = time.perf_counter()
        deadline = start + (timeout if timeout is not None else self.config.acquire_timeout_s)
        sb: Sandbox | None = None
        async with self._cond:
            while True:
                if self._closed:
                    raise PoolClosed("pool was closed while waiting")
                if self._idle[key]:
                    sb = self._idle[key].popleft()
                    break
                if self._total < self.config.max_size:
                    self._total += 1
                    break
                if self._evict_idle_other(key):  # the victim's slot passes to us
                    break
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    raise PoolTimeout(
                        f"no sandbox free after {deadline - start:.1f}s ({self._total} alive, "
                        f"{len(self._in_use)} in use, max_size={self.config.max_size})"
                    )
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await self._cond.wait()
        if sb is None:
            try:
                sb = await self._create(spec)
            except BaseException:
                async with self._cond:
                    self._total -= 1
                    self._cond.notify()
                raise
        self._in_use.add(sb)
        self.metrics.record("acquire", time.perf_counter() - start)
        self._top_up(key)
        return sb

    def _evict_idle_other(self, key: str) -> bool:
        """Destroy one idle sandbox of another spec to make room; True if one was found."""
        for other, queue in self._idle.items():
            if other != key and queue:
                victim = queue.popleft()
                self._spawn(self._destroy(victim, count=False))
                return True
        return False

    def checkin(self, sb: Sandbox, broken: bool = False) -> None:
        """Give a sandbox back: reset in the background, or replace it if it is broken."""
        self._in_use.discard(sb)
        if self._closed:
            self._alive.discard(sb)
            self._spawn(sb.close())
            return
        self._uses[sb.id] = self._uses.get(sb.id, 0) + 1
        worn_out = self.config.max_uses and self._uses[sb.id] >= self.config.max_uses
        if broken or worn_out:
            self._spawn(self._destroy(sb))
        else:
            self._spawn(self._reset_and_return(sb))

    async def _create(self, spec: SandboxSpec) -> Sandbox:
        t = time.perf_counter()
        sb = await self.backend.create(spec, pool_id=self.id)
        if self._closed:  # closed while this one was starting: nobody will return it
            await sb.close()
            raise PoolClosed("pool was closed while a sandbox was being created")
        self._alive.add(sb)
        self.metrics.record("create", time.perf_counter() - t)
        return sb

    async def _reset_and_return(self, sb: Sandbox) -> None:
        try:
            result = await sb.reset()
            self.metrics.record("reset", result.total_s)
        except Exception as e:
            log.warning("reset of %s failed (%s); replacing it", sb, e)
            self.metrics.record("replaced", 0.0)
            await self._destroy(sb)
            return
        async with self._cond:
            if self._closed:
                await sb.close()
                return
            self._idle[sb.spec.key()].append(sb)
            self._cond.notify()

    async def _destroy(self, sb: Sandbox, count: bool = True) -> None:
        """Remove a sandbox; with `count`, free its slot (evictions already reused theirs)."""
        self._uses.pop(sb.id, None)
        with contextlib.suppress(Exception):
            await sb.close()
        self._alive.discard(sb)
        if count:
            async with self._cond:
                self._total -= 1
                self._cond.notify()
            self._top_up(sb.spec.key())

    # ---- warm-up and health ---------------------------------------------------------------
    async def warm(self, spec: SandboxSpec, n: int) -> None:
        """Create sandboxes for `spec` until `n` are idle (bounded by max_size)."""
        key = spec.key()
        self._specs[key] = spec

        async def one() -> None:
            async with self._cond:
                if self._total >= self.config.max_size:
                    return
                self._total += 1
            try:
                sb = await self._create(spec)
            except BaseException:
                async with self._cond:
                    self._total -= 1
                raise
            async with self._cond:
                self._idle[key].append(sb)
                self._cond.notify()

        missing = n - len(self._idle[key])
        await asyncio.gather(*(one() for _ in range(max(0, missing))))

    def _top_up(self, key: str) -> None:
        if self.config.min_idle and not self._closed and len(self._idle[key]) < self.config.min_idle:
            self._spawn(self.warm(self._specs[key], self.config.min_idle))

    async def _health_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.config.health_interval_s)
            await self.check_health()

    async def check_health(self) -> int:
        """Ping every idle sandbox, replacing the dead; returns how many were replaced."""
        replaced = 0
        for queue in list(self._idle.values()):
            for sb in list(queue):
                if not await sb.healthy():
                    with contextlib.suppress(ValueError):
                        queue.remove(sb)
                    replaced += 1
                    self.metrics.record("replaced", 0.0)
                    await self._destroy(sb)
        return replaced

    async def drain(self) -> None:
        """Wait until background resets and replacements have finished."""
        while pending := [t for t in self._tasks if not t.done() and t is not self._health]:
            await asyncio.gather(*pending, return_exceptions=True)

    def stats(self) -> dict[str, object]:
        return {
            "alive": self._total,
            "in_use": len(self._in_use),
            "idle": {k: len(v) for k, v in self._idle.items() if v},
            "latency": self.metrics.summary(),
        }
