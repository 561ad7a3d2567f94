"""Warm web stacks, shared by the envs of one sandbox pool, and Playwright per event loop.

An env takes a stack at its first reset and keeps it (one browser per worker). When the
env closes, its stack goes back here, warm, for the next env, and `acquire` prefers an
idle stack that already runs the task's sites. That holds on the env event loop; envs
given `pool=` run on the caller's loop, whose end nothing announces, so their stacks close
with them. Stacks and Playwright belong to the loop that made them. Stacks on the env
the env event loop are closed at interpreter exit, before the env event loop closes its sandbox pools."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from playwright.async_api import Playwright, async_playwright

from arborl.sandboxes import SandboxPool

from .. import event_loop
from .docker_stack import DockerStack
from .local_stack import LocalStack
from .stack import WebStack

log = logging.getLogger(__name__)

_playwrights: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Any, Playwright]] = (
    weakref.WeakKeyDictionary()
)
_pw_lock: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


async def get_playwright() -> Playwright:
    """This event loop's Playwright (its driver process starts on first use, ~0.5 s)."""
    loop = asyncio.get_running_loop()
    lock = _pw_lock.setdefault(loop, asyncio.Lock())
    async with lock:
        if loop not in _playwrights:
            manager = async_playwright()
            _playwrights[loop] = (manager, await manager.start())
        return _playwrights[loop][1]


@dataclass(frozen=True)
class StackConfig:
    """What kind of stack an env needs (stacks of equal configs are interchangeable)."""

    browser_image: str = "arborl/gui:latest"
    site_image: str = "arborl/base:latest"
    chromium: str = "/usr/bin/chromium"


class StackPool:
    """Idle web stacks over one sandbox pool (Docker) or the host (local).

    A stack holds its containers (or processes) for as long as it lives, so a stack left idle
    for `idle_s` seconds is closed.
    """

    def __init__(self, pool: SandboxPool, config: StackConfig, idle_s: float = 30.0) -> None:
        self.pool = pool
        self.config = config
        self.idle_s = idle_s
        self.loop = asyncio.get_running_loop()
        self.idle: list[WebStack] = []
        self.lent: set[WebStack] = set()
        self.created = 0
        self._timers: dict[WebStack, asyncio.TimerHandle] = {}
        self._closing: set[asyncio.Task[None]] = set()

    async def _new(self) -> WebStack:
        pw = await get_playwright()
        self.created += 1
        if self.pool.backend.name == "docker":
            return DockerStack(pw, self.pool.backend, self.config.browser_image, self.config.site_image)
        return LocalStack(pw, self.config.chromium)

    async def acquire(self, sites: tuple[str, ...]) -> WebStack:
        """A warm stack, preferably one that already runs `sites` (started ones are not)."""
        self.idle = [s for s in self.idle if not s.closed]
        if self.idle:
            stack = max(self.idle, key=lambda s: (sum(n in s.sites for n in sites), -len(s.sites)))
            self.idle.remove(stack)
            timer = self._timers.pop(stack, None)
            if timer is not None:
                timer.cancel()
        else:
            stack = await self._new()
        self.lent.add(stack)
        return stack

    async def release(self, stack: WebStack, broken: bool = False) -> None:
        """Give a stack back: kept warm on the env event loop, closed otherwise.

        Off the env event loop (envs given `pool=`), the caller's loop may end at any time
        after its envs close (`asyncio.run` returning), and nothing would close a warm stack
        then: its containers would wait for the next start's reaper.
        """
        self.lent.discard(stack)
        if broken or stack.closed or not self._on_env_loop():
            await stack.close()
        else:
            self.idle.append(stack)
            self._timers[stack] = self.loop.call_later(self.idle_s, self._expire, stack)

    def _on_env_loop(self) -> bool:
        env_loop = event_loop._loop
        return env_loop is not None and env_loop.pid == os.getpid() and env_loop.loop is self.loop

    def _expire(self, stack: WebStack) -> None:
        self._timers.pop(stack, None)
        if stack in self.idle:
            self.idle.remove(stack)
            task = self.loop.create_task(stack.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        stacks, self.idle = [*self.idle, *self.lent], []
        self.lent.clear()
        await asyncio.gather(*(s.close() for s in stacks), *self._closing, return_exceptions=True)


_pools: weakref.WeakKeyDictionary[SandboxPool, dict[StackConfig, StackPool]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def stack_pool(pool: SandboxPool, config: StackConfig) -> StackPool:
    """The stack pool over `pool` for `config` (call on the pool's event loop)."""
    with _lock:
        by_config = _pools.setdefault(pool, {})
        if config not in by_config:
            by_config[config] = StackPool(pool, config)
        return by_config[config]


async def close_stack_pools(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Close every stack pool of `loop` (default: the running one), and its Playwright."""
    loop = loop or asyncio.get_running_loop()
    with _lock:
        mine = [sp for by in _pools.values() for sp in by.values() if sp.loop is loop]
        for by in _pools.values():
            for key in [k for k, sp in by.items() if sp in mine]:
                del by[key]
    await asyncio.gather(*(sp.close() for sp in mine), return_exceptions=True)
    entry = _playwrights.pop(loop, None)
    if entry is not None:
        with contextlib.suppress(Exception):
            await entry[0].__aexit__(None, None, None)


def _close_at_exit() -> None:
    env_loop = event_loop._loop
    if env_loop is None or env_loop.pid != os.getpid() or not env_loop.loop.is_running():
        return
    try:
        env_loop.run(close_stack_pools(env_loop.loop), timeout=60.0)
    except Exception as e:  # exiting anyway: the next start reaps what is left
        log.debug("closing web stacks at exit: %s", e)


# Registered after the env event loop's own hook, so it runs first (threading runs these in
# reverse order): stacks close while the env_loop's loop and sandbox pools are still alive.
_register = getattr(threading, "_register_atexit", None)
if _register is not None:
    _register(_close_at_exit)
