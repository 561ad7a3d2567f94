"""A pool of ScienceWorld simulators, one JVM each, reused across episodes.

Starting the simulator (a JVM behind Py4J, `scienceworld.ScienceWorldEnv`) takes seconds;
loading a task into a running one takes a fraction of that and rebuilds the world from the
task and variation alone (`arborl.tasks.scienceworld.simulator`), so an episode takes a JVM
from the pool, `load`s its task in it and gives it back at its end: JVMs are started once and
never restarted between episodes. A JVM that died (or that raised mid-call, leaving its world
in a state nobody can vouch for) is given back as broken: the pool shuts it down and starts
another when one is next needed.

The pool is thread-safe and belongs to no event loop: JVM calls block on a socket, so the env
makes them in worker threads, and `acquire` waits for a free JVM by polling rather than by
holding a worker thread.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time
from typing import Any

from arborl.sandboxes import SandboxCrashed, SandboxStartError, SandboxUnavailable
from arborl.tasks.scienceworld import simulator

log = logging.getLogger(__name__)


class JVMDied(SandboxCrashed):
    """A ScienceWorld JVM died or failed mid-call: an infrastructure error (the episode is
    retried elsewhere, never scored); the pool replaces the JVM."""

    def __init__(self, reason: str) -> None:
        super().__init__("scienceworld-jvm", reason, fault="infra")


def start_game() -> Any:
    """A new simulator (`scienceworld.ScienceWorldEnv`) in its own JVM, started so that a world
    depends on its task and variation alone (`arborl.tasks.scienceworld.simulator`)."""
    try:
        return simulator.start()
    except ImportError as e:
        raise SandboxUnavailable(
            f"scienceworld is not installed ({e}): run scripts/setup.sh, or pip install scienceworld==1.2.3"
        ) from e
    except Exception as e:  # Py4J raises bare Exceptions when no java binary runs
        raise SandboxStartError(
            f"could not start a ScienceWorld JVM ({type(e).__name__}: {e}): install a Java runtime "
            "(apt-get install default-jre-headless; scripts/setup.sh does)"
        ) from e


def is_alive(game: Any) -> bool:
    proc = getattr(game._gateway, "java_process", None)
    return proc is not None and proc.poll() is None


#: Shut a JVM down, killing it if it does not exit on its own (the simulator's own stop).
stop_game = simulator.stop


class JVMPool:
    """Up to `size` simulators; `acquire` one per episode, `release` it after."""

    def __init__(self, size: int = 2, *, poll_s: float = 0.05) -> None:
        if size < 1:
            raise ValueError(f"a JVM pool needs size >= 1, got {size}")
        self.size, self.poll_s = size, poll_s
        self._lock = threading.Lock()
        self._idle: list[Any] = []
        self._count = 0  # idle + leased + starting
        self._closed = False
        self.started = 0
        """JVMs started so far (a replaced JVM counts again)."""
        self.replaced = 0
        """Broken JVMs shut down so far."""

    async def acquire(self) -> Any:
        """A running simulator, leased to the caller until `release`."""
        while True:
            game, start = self._take()
            if game is not None:
                return game
            if start:
                return await self._start()
            await asyncio.sleep(self.poll_s)

    def release(self, game: Any, *, broken: bool = False) -> None:
        """Give a simulator back; `broken=True` (or a dead JVM) shuts it down instead."""
        keep = not broken and not self._closed and is_alive(game)
        with self._lock:
            if keep:
                self._idle.append(game)
                return
            self._count -= 1
            self.replaced += not self._closed
        stop_game(game)

    def close(self) -> None:
        """Shut every idle JVM down; leased ones are shut down as they come back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for game in idle:
            stop_game(game)

    def _take(self) -> tuple[Any, bool]:
        with self._lock:
            if self._closed:
                raise SandboxUnavailable("the ScienceWorld JVM pool is closed")
            while self._idle:
                game = self._idle.pop()
                if is_alive(game):
                    return game, False
                self._count -= 1
                self.replaced += 1
            if self._count < self.size:
                self._count += 1
                return None, True
        return None, False

    async def _start(self) -> Any:
        t = time.perf_counter()
        try:
            game = await asyncio.to_thread(start_game)
        except BaseException:
            with self._lock:
                self._count -= 1
            raise
        self.started += 1
        log.info("started a ScienceWorld JVM in %.1f s", time.perf_counter() - t)
        return game


_default: JVMPool | None = None
_default_lock = threading.Lock()


def default_pool() -> JVMPool:
    """The process's shared pool: `ARBORL_SCIENCEWORLD_JVMS` JVMs (default: the CPU count, at most 8)."""
    global _default
    with _default_lock:
        if _default is None:
            size = int(os.environ.get("ARBORL_SCIENCEWORLD_JVMS") or min(8, os.cpu_count() or 1))
            _default = JVMPool(size)
            atexit.register(_default.close)
        return _default
