"""`SandboxNode`: one node's sandboxes, served to the harness through Ray actor calls.

One actor runs on each node that offers sandboxes, pinned there (`pool.py` places it).
It owns an ordinary `SandboxPool` on the node's own backend (Docker or bubblewrap), so the
channel to each sandbox stays a unix socket on that node, with every guarantee of
docs/sandboxes.md, and reset in place happens on the node, never across the network.

The harness never holds a `Sandbox` of another node: it holds a lease id, and every call of
the episode names it (`call`). Only the operations an env uses are served (`SERVED`); the
snapshot, the channel's key and the backend stay on the node. `with_backend` runs a function
of the harness on the node's backend (building a task's image there): only the harness's
process holds the actor, and whoever can call a Ray actor can run code on the node anyway.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from ..base import Sandbox, SandboxSpec
from ..errors import SandboxCrashed
from ..factory import make_backend
from ..owner import set_run_id
from ..pool import PoolConfig, SandboxPool
from .watchdog import reap_when_gone

#: What a harness may ask of a leased sandbox: what envs do with one, nothing of its lifecycle.
SERVED = frozenset(
    {"exec", "read_file", "write_file", "upload", "download", "reset", "kill_processes", "ping"}
)


class SandboxNode:
    """A node's `SandboxPool`, lent out by lease id. Made as a Ray actor by `RaySandboxPool`."""

    def __init__(self, backend: dict[str, Any], pool: dict[str, Any], run_id: str) -> None:
        """`backend`: this node's backend config (`make_backend`); `pool`: its `PoolConfig`;
        `run_id`: the run its sandboxes are labelled with, so a reaper can find them."""
        set_run_id(run_id)
        self.run_id = run_id
        self._backend_config = backend
        self._pool_config = PoolConfig(**pool)
        self._pool: SandboxPool | None = None
        self._leases: dict[str, Sandbox] = {}

    async def start(self) -> dict[str, Any]:
        """Start the pool (reaping the orphans of dead owners on this node); what it offers.
        A watchdog removes this actor's sandboxes when it dies, closed or not (`watchdog.py`)."""
        if self._pool is None:
            backend = await asyncio.to_thread(make_backend, self._backend_config)
            chosen = getattr(backend, "config", None)  # the one "auto" picked, for the watchdog
            await asyncio.to_thread(
                reap_when_gone,
                os.getpid(),
                chosen.model_dump() if isinstance(chosen, BaseModel) else dict(self._backend_config),
            )
            self._pool = await SandboxPool(backend, self._pool_config).start()
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "backend": self._pool.backend.name,
            "capacity": self._pool_config.max_size,
        }

    def _started(self) -> SandboxPool:
        if self._pool is None:
            raise RuntimeError("SandboxNode.start() was not called")
        return self._pool

    async def checkout(self, spec: SandboxSpec, timeout: float | None = None) -> tuple[str, str]:
        """Lease a ready sandbox for `spec`: (lease id, sandbox id)."""
        sb = await self._started().checkout(spec, timeout)
        lease = uuid.uuid4().hex
        self._leases[lease] = sb
        return lease, sb.id

    async def checkin(self, lease: str, broken: bool = False) -> None:
        """End a lease: the pool resets the sandbox in place, or replaces it if `broken`."""
        sb = self._leases.pop(lease, None)
        if sb is not None:
            self._started().checkin(sb, broken=broken)

    async def call(self, lease: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run `Sandbox.<method>(*args, **kwargs)` on the leased sandbox."""
        if method not in SERVED:
            raise ValueError(f"{method!r} is not served to the harness; use one of {sorted(SERVED)}")
        sb = self._leases.get(lease)
        if sb is None:
            raise SandboxCrashed(lease, "this node holds no such lease (its pool actor restarted)", "infra")
        return await getattr(sb, method)(*args, **kwargs)

    async def with_backend(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """`fn(backend, *args)` in a thread, on this node's own backend: what must happen
        where the sandboxes run, such as building a task's image on the node's engine. Only
        the harness reaches this actor (the agent reaches a sandbox, never the actor)."""
        return await asyncio.to_thread(fn, self._started().backend, *args)

    async def has_image(self, image: str) -> bool:
        """Whether this node's backend holds `image` (placement follows the images)."""
        return await asyncio.to_thread(self._started().backend.has_image, image)

    async def stats(self) -> dict[str, object]:
        return {**self._started().stats(), "leases": len(self._leases)}

    async def drain(self) -> None:
        await self._started().drain()

    async def close(self) -> None:
        """Destroy every sandbox of this node's pool."""
        self._leases.clear()
        await self._started().close()

    async def reap_run(self) -> list[str]:
        """Remove what this run left on this node, whoever made it (an actor that died before
        this one, on a node that came back); returns the ids. Called once every node closed."""
        return await asyncio.to_thread(self._started().backend.reap, False, self.run_id)
