"""The envs' event loop: one background event loop per process, and the default sandbox pools.

A `SandboxPool` (its condition, its background resets, its channel connections) belongs to
the event loop that uses it. Envs made with `gymnasium.make(id)` and no `pool=` therefore
share pools that live on one long-lived loop, in a daemon thread:

- sync `env.reset()/step()` run the async twin on that loop and wait for it;
- `await env.astep()` from any other loop hops onto it (a thread-safe future), so async
  callers need not care which loop owns the sandboxes;
- an env given `pool=` runs on the caller's loop instead (the pool is the caller's).

The default pool wraps `make_backend({"type": "auto"})` (Docker when the engine and base
image exist, else bubblewrap); `configure()` changes that before first use, and
`configure(backend={"type": "ray", ...})` makes it a `RaySandboxPool` over the sandbox nodes
of a Ray cluster (docs/scale-out.md). Pools are
closed at interpreter exit; a forked child (e.g. `AsyncVectorEnv`) starts a fresh loop.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures.thread  # noqa: F401 - its exit hook must be registered before ours
import contextlib
import logging
import os
import threading
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar, cast

from arborl.sandboxes import PoolConfig, SandboxBackend, SandboxPool, backend_names, make_backend, make_pool

log = logging.getLogger(__name__)
T = TypeVar("T")

_DEFAULTS: dict[str, Any] = {"backend": {"type": "auto"}, "pool": PoolConfig(max_size=8)}


class EnvLoop:
    """A daemon thread running an event loop, plus the pools that live on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="arborl-envs", daemon=True)
        self.thread.start()
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._backend: SandboxBackend | None = None
        self._pools: dict[int, tuple[SandboxBackend, SandboxPool]] = {}

    def on_loop(self) -> bool:
        """Whether the caller runs on this loop."""
        return threading.current_thread() is self.thread

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the env event loop and block until it is done (the sync API)."""
        if self.on_loop():
            coro.close()
            raise RuntimeError(
                "a sync env method was called from inside the env event loop, which would deadlock; "
                "use the async twin (`await env.areset()` / `await env.astep(action)`)"
            )
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def hop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` on the env event loop from another loop (cancellation propagates)."""
        if self.on_loop():
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def default_backend(self) -> SandboxBackend:
        with self._lock:
            if self._backend is None:
                self._backend = make_backend(_DEFAULTS["backend"])
                log.info("env event loop: default sandbox backend is %s", self._backend.name)
            return self._backend

    def pool_for(self, backend: SandboxBackend | None = None) -> SandboxPool:
        """The loop's pool over `backend` (default: the auto backend), made on first use."""
        if backend is None and _DEFAULTS["backend"].get("type") in backend_names("cluster"):
            return self._cluster_pool()
        backend = backend or self.default_backend()
        with self._lock:
            entry = self._pools.get(id(backend))
            if entry is None:
                entry = (backend, SandboxPool(backend, _DEFAULTS["pool"].model_copy()))
                self._pools[id(backend)] = entry
            return entry[1]

    def _cluster_pool(self) -> SandboxPool:
        """The pool a cluster backend (``ray``) builds over its hosts, with `SandboxPool`'s API;
        the backend registry builds it, so this layer names no backend."""
        with self._lock:
            entry = self._pools.get(0)
            if entry is None:
                pool = make_pool(_DEFAULTS["backend"], _DEFAULTS["pool"].model_copy())
                entry = (cast(SandboxBackend, None), pool)
                self._pools[0] = entry
            return entry[1]

    def shutdown(self, timeout: float = 30.0) -> None:
        """Close every pool (destroying their sandboxes) and stop the loop."""
        if not self.loop.is_running():
            return
        pools = [pool for _, pool in self._pools.values()]
        self._pools.clear()

        async def close_all() -> None:
            # Let background resets finish first: close() would drop the sandboxes they hold.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(timeout / 2):
                    await asyncio.gather(*(p.drain() for p in pools))
            await asyncio.gather(*(p.close() for p in pools), return_exceptions=True)

        with contextlib.suppress(Exception):
            self.run(close_all(), timeout=timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5.0)


_loop: EnvLoop | None = None
_loop_lock = threading.Lock()


def get_env_loop() -> EnvLoop:
    """The process's env event loop, started on first use."""
    global _loop
    rt = _loop
    if rt is not None and rt.pid == os.getpid():
        return rt
    with _loop_lock:
        if _loop is None or _loop.pid != os.getpid():
            _loop = EnvLoop()
        return _loop


def configure(backend: Mapping[str, Any] | None = None, pool: PoolConfig | None = None) -> None:
    """Set the default backend config and pool settings; call before the first env runs."""
    if _loop is not None and (_loop._pools or _loop._backend is not None):
        raise RuntimeError("configure() must be called before the first env uses a sandbox")
    if backend is not None:
        _DEFAULTS["backend"] = dict(backend)
    if pool is not None:
        _DEFAULTS["pool"] = pool


def default_pool(backend: SandboxBackend | None = None) -> SandboxPool:
    """The shared pool (on the env event loop) that envs without `pool=` use."""
    return get_env_loop().pool_for(backend)


def _forget_in_child() -> None:
    # The loop thread does not survive fork; the child makes its own loop on demand.
    global _loop
    _loop = None


def _shutdown_at_exit() -> None:
    if _loop is not None and _loop.pid == os.getpid():
        _loop.shutdown()


os.register_at_fork(after_in_child=_forget_in_child)
# Pools close through thread-pool executors (Docker SDK calls, asyncio.to_thread), which
# refuse work once `concurrent.futures` has run its own exit hook. Threading's exit hooks run
# in reverse order of registration, before that point, so register there (after it).
_register = getattr(threading, "_register_atexit", None)
if _register is not None:
    _register(_shutdown_at_exit)
else:  # pragma: no cover - other Pythons
    atexit.register(_shutdown_at_exit)
