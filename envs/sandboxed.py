"""`SandboxEnv`: a TextEnv that holds one sandbox lease per episode.

The lease is taken at reset (or on first use, for lazy envs) from `pool=` or the runtime's
shared pool, and given back when the episode ends, the env closes, or anything fails. A
finished episode's sandbox is parked briefly so the env's next reset can reuse it in place.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ClassVar, TypeVar

from arborl.sandboxes import ExecResult, Sandbox, SandboxBackend, SandboxError, SandboxPool, SandboxSpec

from .base import TextEnv
from .event_loop import default_pool, get_env_loop

log = logging.getLogger(__name__)
T = TypeVar("T")
_BACKGROUND: set[asyncio.Task[None]] = set()


class SandboxExhausted(SandboxError):
    """The sandbox cannot start another process (its process or memory limit is used up,
    e.g. by a fork bomb). Only a reset recovers it, so the episode ends."""

    fatal = True  # the pool replaces the sandbox instead of resetting it
    fault = "agent"  # only the agent's processes use up the sandbox's limits


def check_started(result: ExecResult) -> ExecResult:
    """`result`, or SandboxExhausted when the command could not even start for lack of resources."""
    err = result.stderr
    if (
        result.exit_code == 126
        and "cannot start command" in err
        and ("Resource temporarily unavailable" in err or "Cannot allocate memory" in err)
    ):
        raise SandboxExhausted(f"the sandbox ran out of processes or memory ({err.strip()[:200]})")
    return result


class TimedSandbox:
    """The leased sandbox as an env sees it: every call adds to the step's `sandbox_s`."""

    def __init__(self, sandbox: Sandbox, env: TextEnv) -> None:
        self.raw = sandbox
        self._env = env

    @property
    def id(self) -> str:
        return self.raw.id

    @property
    def spec(self) -> SandboxSpec:
        return self.raw.spec

    async def _timed(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        start = time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            self._env._sandbox_s += time.perf_counter() - start

    async def exec(self, cmd: str | list[str], **kwargs: Any) -> ExecResult:
        """`Sandbox.exec`; raises SandboxExhausted when nothing can start any more."""
        return check_started(await self._timed(self.raw.exec, cmd, **kwargs))

    async def read_file(self, path: str, **kwargs: Any) -> bytes:
        return await self._timed(self.raw.read_file, path, **kwargs)

    async def write_file(self, path: str, data: bytes | str, **kwargs: Any) -> None:
        await self._timed(self.raw.write_file, path, data, **kwargs)

    async def upload(self, src: Any, dest: str, **kwargs: Any) -> int:
        return await self._timed(self.raw.upload, src, dest, **kwargs)

    async def download(self, path: str) -> bytes:
        return await self._timed(self.raw.download, path)

    async def reset(self) -> Any:
        """Kill every process of the episode and restore the snapshot (scoring starts clean)."""
        return await self._timed(self.raw.reset)


class SandboxEnv(TextEnv):
    """A TextEnv that holds one sandbox lease per episode.

    The sandbox comes from `pool=` (a `SandboxPool` of the caller's event loop), or from the
    runtime's shared pool over `backend=` (default: the auto backend). When an episode ends
    its sandbox is parked for `park_s` seconds: a reset of this env within that time resets
    it in place and reuses it (milliseconds, no pool round trip); otherwise, or on
    `release()`/`close()`, it goes back to the pool.
    """

    #: Take the lease at reset (False: on first `await self.get_sandbox()`).
    eager_sandbox: ClassVar[bool] = True

    def __init__(
        self,
        *,
        pool: SandboxPool | None = None,
        backend: SandboxBackend | None = None,
        park_s: float = 1.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._user_pool = pool
        self._backend = backend
        self.park_s = park_s
        self._lease: tuple[SandboxPool, Sandbox] | None = None
        self._parked: tuple[SandboxPool, Sandbox] | None = None
        self._park_timer: asyncio.TimerHandle | None = None
        self._proxy: TimedSandbox | None = None

    def sandbox_spec(self, task: Any) -> SandboxSpec:
        """The sandbox an episode of `task` needs (default: the base image, no network)."""
        return SandboxSpec()

    @property
    def pool(self) -> SandboxPool:
        return self._user_pool or default_pool(self._backend)

    @property
    def sandbox(self) -> TimedSandbox:
        """The episode's sandbox (eager envs; lazy ones `await self.get_sandbox()`)."""
        if self._proxy is None:
            raise RuntimeError("no sandbox is leased: reset() first (lazy envs: await get_sandbox())")
        return self._proxy

    async def get_sandbox(self) -> TimedSandbox:
        """The episode's sandbox, leased now if it was not yet."""
        if self._proxy is None:
            if not self._active and self.task is None:
                raise RuntimeError("no episode: reset() first")
            await self._lease_for(self.task)
        assert self._proxy is not None
        return self._proxy

    async def _at_home(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._user_pool is not None:
            return await coro
        return await get_env_loop().hop(coro)

    def _holds_resources(self) -> bool:
        return self._active or self._lease is not None or self._parked is not None

    async def aclose(self) -> None:
        await self._at_home(self._close())

    def close(self) -> None:
        if self._user_pool is not None and self._holds_resources():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None:  # called sync from inside the pool's loop: finish there
                task = loop.create_task(self._close())
                _BACKGROUND.add(task)
                task.add_done_callback(_BACKGROUND.discard)
                return
        super().close()

    async def arelease(self) -> None:
        """Give a parked sandbox back to the pool now (the runner does after each episode)."""
        await self._at_home(self._close_parked())

    async def _close(self) -> None:
        self._end_episode()
        self._give_back_parked()

    async def _close_parked(self) -> None:
        self._give_back_parked()

    async def _before_reset(self, task: Any) -> None:
        # Lazy envs keep a parked sandbox until their first use (reused in place) or its timer.
        if self.eager_sandbox:
            await self._lease_for(task)

    async def _lease_for(self, task: Any) -> None:
        spec = self.sandbox_spec(task)
        start = time.perf_counter()
        try:
            sb = await self._reuse_parked(spec)
            pool = self.pool
            if sb is None:
                sb = await pool.checkout(spec)
        finally:
            self._sandbox_s += time.perf_counter() - start
        self._lease = (pool, sb)
        self._proxy = TimedSandbox(sb, self)

    async def _reuse_parked(self, spec: SandboxSpec) -> Sandbox | None:
        parked = self._parked
        if parked is None or parked[1].spec != spec or parked[0] is not self.pool:
            self._give_back_parked()
            return None
        self._cancel_park_timer()
        self._parked = None
        try:
            await parked[1].reset()
        except SandboxError as e:
            log.info("in-place reset of %s failed (%s); taking another sandbox", parked[1], e)
            parked[0].checkin(parked[1], broken=True)
            return None
        except BaseException:
            parked[0].checkin(parked[1], broken=True)
            raise
        return parked[1]

    def _end_episode(self, broken: bool = False) -> None:
        """Episode over: park a healthy lease for this env's next reset; return a broken one."""
        self._active = False
        lease, self._lease, self._proxy = self._lease, None, None
        if lease is None:
            return
        self._give_back_parked()
        if broken or self.park_s <= 0:
            lease[0].checkin(lease[1], broken=broken)
            return
        self._parked = lease
        self._park_timer = asyncio.get_running_loop().call_later(self.park_s, self._give_back_parked)

    def _cancel_park_timer(self) -> None:
        if self._park_timer is not None:
            self._park_timer.cancel()
            self._park_timer = None

    def _give_back_parked(self) -> None:
        self._cancel_park_timer()
        parked, self._parked = self._parked, None
        if parked is not None:
            parked[0].checkin(parked[1])
