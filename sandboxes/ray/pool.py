"""`RaySandboxPool`: the sandboxes of every node of a Ray cluster, behind `SandboxPool`'s API.

    async with RaySandboxPool(RayPoolConfig(backend={"type": "docker"})) as pool:
        async with pool.acquire(spec) as sb:        # this process's node, else most room
            await sb.exec("pytest -q")              # runs on that node, over its local socket

- One `SandboxNode` actor per node that carries the `node_resource` custom resource, pinned
  there (hard node affinity), owning a `SandboxPool` on that node's own backend: the channel,
  the reset in place and the warm sandboxes never leave the node (`node.py`).
- Placement: each acquire goes to a live node with free capacity (its pool's `max_size`)
  that holds the spec's image (asked of each node once per image, again after
  `on_each_node` or a node joins; when no node holds it, any node, whose error then says
  so), preferring the node this process runs on (`prefer_own_node`: no hop off the host),
  then one that holds a warm sandbox of the same spec, then the one with most room.
  Every call of the episode then goes to that node (`RemoteSandbox`). Ray actor calls only.
- Faults: a node, actor or worker that dies makes the episode's next call raise
  `SandboxCrashed` with fault "infra" (retried, never scored). The pool stops placing there;
  every `revive_interval_s` it opens an actor on each sandbox node that has none live (a
  node back, or a new one) and places there again once that actor has started.
- No leaks: sandboxes are labelled with the pool's run id on every node. `close()` closes
  every node's pool, then each node reaps what this run left there (a dead actor's
  sandboxes included). A node lost for good is reaped when an actor starts there again
  (its owner is dead). Actors are owned by this process: Ray ends them when it exits, and
  each actor's watchdog then reaps its node's sandboxes (`watchdog.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import ray
from ray import exceptions as rx
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..base import SandboxSpec
from ..errors import PoolClosed, PoolTimeout, SandboxUnavailable
from ..pool import PoolConfig, lend
from .config import RayPoolConfig
from .node import SandboxNode
from .sandbox import NODE_LOST, RemoteSandbox, cause_of

log = logging.getLogger(__name__)
T = TypeVar("T")
_NodeActor: Any = ray.remote(SandboxNode)


@dataclass(eq=False)
class NodeState:
    """One sandbox node as the harness sees it. A node that comes back gets a new NodeState."""

    node_id: str
    actor: Any
    host: str
    capacity: int
    leased: int = 0
    up: bool = True
    warm: Counter[str] = field(default_factory=Counter)  # idle sandboxes per spec key (a hint)

    def free(self) -> int:
        return self.capacity - self.leased


class RaySandboxPool:
    """`SandboxPool`'s API (`acquire`, `checkout`/`checkin`, `drain`, `stats`, `close`) over
    the sandbox nodes of a Ray cluster. Use it from one event loop."""

    def __init__(self, config: RayPoolConfig | None = None) -> None:
        config = config or RayPoolConfig()
        #: the label of this pool's sandboxes on every node (a fresh one unless the config names it)
        self.id: str = config.run_id or uuid.uuid4().hex[:12]
        self.config = config.model_copy(update={"run_id": self.id})
        self.nodes: dict[str, NodeState] = {}
        self.lost: list[tuple[str, float]] = []  # (node id, time.monotonic()) of each loss
        self._freed = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._returns: set[asyncio.Task[Any]] = set()  # check-ins on their way to the nodes
        self._starting: asyncio.Future[None] | None = None
        self._failed: dict[str, float] = {}  # node id -> when its actor last failed to start
        self._images: dict[str, set[str]] = {}  # image -> the node ids known to hold it
        self._closed = False
        self.own_node: str | None = None  # the Ray node this process runs on, once started

    # ---- lifecycle ----------------------------------------------------------------------
    async def start(self) -> RaySandboxPool:
        """Join Ray if this process has not, and start an actor on every sandbox node."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        await asyncio.shield(self._starting)
        return self

    async def _start(self) -> None:
        if not ray.is_initialized():
            await asyncio.to_thread(ray.init, address=self.config.address)
        if self.config.prefer_own_node:
            self.own_node = ray.get_runtime_context().get_node_id()
        await self._discover()
        if not self.nodes:
            raise SandboxUnavailable(
                f"no Ray node offers sandboxes: start them with `ray start --resources="
                f"'{{\"{self.config.node_resource}\": 1}}'` (docs/scale-out.md)"
            )
        self._spawn(self._revive_loop())

    async def close(self) -> None:
        """Destroy every sandbox on every live node, then reap this run's leftovers there."""
        if self._closed:
            return
        self._closed = True
        for task in [*self._tasks, *self._returns]:  # check-ins are moot: everything goes
            task.cancel()
        await asyncio.gather(*self._tasks, *self._returns, return_exceptions=True)
        live = [n for n in self.nodes.values() if n.up]
        await asyncio.gather(*(self._quietly(n, n.actor.close.remote()) for n in live))
        await asyncio.gather(*(self._quietly(n, n.actor.reap_run.remote()) for n in live))
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                ray.kill(node.actor)
        self._freed.set()

    async def __aenter__(self) -> RaySandboxPool:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _spawn(self, coro: Coroutine[Any, Any, Any], tasks: set[asyncio.Task[Any]] | None = None) -> None:
        task = asyncio.ensure_future(coro)
        bucket = self._tasks if tasks is None else tasks
        bucket.add(task)
        task.add_done_callback(bucket.discard)

    async def _quietly(self, node: NodeState, ref: Awaitable[Any]) -> Any:
        try:
            return await ref
        except NODE_LOST as e:
            self.node_lost(node, e)
        except rx.RayTaskError as e:
            log.warning("sandbox node %s: %s", node.host, cause_of(e))
        return None

    # ---- nodes --------------------------------------------------------------------------
    async def _discover(self) -> None:
        """Open an actor on every live sandbox node that has no live actor yet."""
        res = self.config.node_resource
        alive = [
            n for n in await asyncio.to_thread(ray.nodes) if n.get("Alive") and n["Resources"].get(res, 0) > 0
        ]
        retry = time.monotonic() - 10 * self.config.revive_interval_s  # a node that failed to start
        todo = [
            n["NodeID"]
            for n in alive
            if (n["NodeID"] not in self.nodes or not self.nodes[n["NodeID"]].up)
            and self._failed.get(n["NodeID"], float("-inf")) < retry
        ]
        await asyncio.gather(*(self._open(node_id) for node_id in todo))

    async def _open(self, node_id: str) -> None:
        actor = _NodeActor.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            num_cpus=0,
            max_restarts=0,
        ).remote(self.config.backend, self.config.pool.model_dump(), self.id)
        try:
            async with asyncio.timeout(self.config.start_timeout_s):
                info = await actor.start.remote()
        except (TimeoutError, rx.RayError) as e:
            why = cause_of(e) if isinstance(e, rx.RayTaskError) else e
            log.warning(
                "sandbox node %s did not start its pool (%s: %s)", node_id[:12], type(why).__name__, why
            )
            self._failed[node_id] = time.monotonic()
            with contextlib.suppress(Exception):
                ray.kill(actor)
            return
        if self._closed:
            ray.kill(actor)
            return
        self.nodes[node_id] = NodeState(node_id, actor, info["host"], int(info["capacity"]))
        self._images.clear()  # the node may hold images a placement has not seen
        log.info(
            "sandbox node %s (%s, %s): %d sandboxes",
            info["host"],
            node_id[:12],
            info["backend"],
            info["capacity"],
        )
        self._freed.set()

    async def _revive_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.config.revive_interval_s)
            try:
                await self._discover()
            except Exception as e:  # Ray's control plane unreachable for a moment: try again
                log.warning("looking for sandbox nodes failed: %s", e)

    def is_live(self, node: Any) -> bool:
        """Whether `node` is still the live entry of its node (not lost, not replaced)."""
        return bool(node.up) and self.nodes.get(node.node_id) is node

    def node_lost(self, node: Any, error: BaseException) -> None:
        """Stop placing on `node` until an actor starts there again."""
        if node.up:
            node.up = False
            self.lost.append((node.node_id, time.monotonic()))
            log.warning(
                "sandbox node %s (%s) lost (%s): nothing is placed there until its actor is back",
                node.host,
                node.node_id[:12],
                type(error).__name__,
            )
            with contextlib.suppress(Exception):
                ray.kill(node.actor)
        self._freed.set()

    async def _holding(self, image: str) -> set[str] | None:
        """The live nodes that hold `image`; None when none does (or none answers)."""
        known = self._images.get(image, set())
        if any(self.is_live(self.nodes[n]) for n in known if n in self.nodes):
            return known
        live = [n for n in self.nodes.values() if n.up]
        answers = await asyncio.gather(
            *(n.actor.has_image.remote(image) for n in live), return_exceptions=True
        )
        held = set()
        for node, answer in zip(live, answers, strict=True):
            if isinstance(answer, NODE_LOST):
                self.node_lost(node, answer)
            elif answer is True:
                held.add(node.node_id)
        if held:
            self._images[image] = held
        return held or None

    def _place(self, key: str, holding: set[str] | None = None) -> NodeState | None:
        room = [
            n
            for n in self.nodes.values()
            if n.up and n.free() > 0 and (holding is None or n.node_id in holding)
        ]
        if not room:
            return None
        node = max(room, key=lambda n: (n.node_id == self.own_node, n.warm[key] > 0, n.free()))
        if node.warm[key] > 0:
            node.warm[key] -= 1
        node.leased += 1
        return node

    # ---- acquire / release --------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def acquire(
        self, spec: SandboxSpec | None = None, timeout: float | None = None
    ) -> AsyncIterator[RemoteSandbox]:
        """Lend a ready sandbox for `spec` on some node; it is reset there on exit."""
        async with lend(self, spec, timeout) as sb:
            yield sb

    async def checkout(self, spec: SandboxSpec, timeout: float | None = None) -> RemoteSandbox:
        """Take a sandbox on the node with most room; pair with `checkin`. Prefer `acquire`."""
        if self._closed:
            raise PoolClosed("pool is closed")
        await self.start()
        start = time.monotonic()
        deadline = start + (timeout if timeout is not None else self.config.acquire_timeout_s)
        while True:
            if self._closed:
                raise PoolClosed("pool was closed while waiting")
            remaining = deadline - time.monotonic()
            node = self._place(spec.key(), await self._holding(spec.image))
            if node is None:
                if remaining <= 0:
                    raise PoolTimeout(self._full_message(time.monotonic() - start))
                self._freed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(remaining, self.config.revive_interval_s)):
                        await self._freed.wait()
                continue
            ref = node.actor.checkout.remote(spec, max(remaining, 1.0))
            try:
                lease, sandbox_id = await ref
            except asyncio.CancelledError:
                self._spawn(self._return_late(node, ref, spec), self._returns)
                raise
            except NODE_LOST as e:
                self.node_lost(node, e)  # nothing was lent yet: place the acquire elsewhere
                continue
            except rx.RayTaskError as e:
                self._release_slot(node)
                raise cause_of(e) from None
            except BaseException:
                self._release_slot(node)
                raise
            return RemoteSandbox(self, node, lease, sandbox_id, spec)

    async def _return_late(self, node: NodeState, ref: Any, spec: SandboxSpec) -> None:
        """Check in a lease whose acquirer was cancelled before the node answered."""
        with contextlib.suppress(Exception):
            lease, sandbox_id = await ref
            self.checkin(RemoteSandbox(self, node, lease, sandbox_id, spec))
            return
        self._release_slot(node)

    def _full_message(self, waited: float) -> str:
        up = [n for n in self.nodes.values() if n.up]
        return (
            f"no sandbox free on any node after {waited:.1f}s ({len(up)} of {len(self.nodes)} nodes up, "
            f"{sum(n.leased for n in up)} of {sum(n.capacity for n in up)} leased): add sandbox nodes, "
            "raise pool.max_size per node, or the acquire timeout"
        )

    def _release_slot(self, node: NodeState) -> None:
        if self.is_live(node):
            node.leased -= 1
        self._freed.set()

    def checkin(self, sb: RemoteSandbox, broken: bool = False) -> None:
        """Give a sandbox back: its node resets it in place, or replaces it if `broken`."""
        if sb.returned:
            return
        sb.returned = True
        node = cast(NodeState, sb.node)
        if self.is_live(node):
            if not broken:
                node.warm[sb.spec.key()] += 1
            ref: Any = node.actor.checkin.remote(sb.lease, broken)
            with contextlib.suppress(RuntimeError):  # no running loop: Ray sends it anyway
                asyncio.get_running_loop()
                self._spawn(self._quietly(node, ref), self._returns)
        self._release_slot(node)

    # ---- the nodes' own backends ----------------------------------------------------------
    async def on_each_node(self, fn: Callable[..., T], *args: Any) -> dict[str, T]:
        """`fn(backend, *args)` on every live node, in a thread there, on that node's own
        backend (e.g. build the images a suite needs on each node's Docker engine): the
        results by node id. `fn` must be importable there (a module-level function of
        arborl); an error on a node is raised here, as that node raised it."""
        await self.start()
        live = [n for n in self.nodes.values() if n.up]
        results = await asyncio.gather(
            *(n.actor.with_backend.remote(fn, args) for n in live), return_exceptions=True
        )
        out: dict[str, T] = {}
        for node, result in zip(live, results, strict=True):
            if isinstance(result, NODE_LOST):
                self.node_lost(node, result)
            elif isinstance(result, rx.RayTaskError):
                raise cause_of(result) from None
            elif isinstance(result, BaseException):
                raise result
            else:
                out[node.node_id] = result
        if not out:
            raise SandboxUnavailable("every sandbox node was lost; start them again (docs/scale-out.md)")
        self._images.clear()  # `fn` may have built images
        return out

    # ---- waiting and numbers --------------------------------------------------------------
    async def drain(self) -> None:
        """Wait until every node's background resets and replacements have finished."""
        await asyncio.gather(*self._returns, return_exceptions=True)
        live = [n for n in self.nodes.values() if n.up]
        await asyncio.gather(*(self._quietly(n, n.actor.drain.remote()) for n in live))

    def stats(self) -> dict[str, object]:
        return {
            "nodes": {
                n.node_id: {"host": n.host, "up": n.up, "capacity": n.capacity, "leased": n.leased}
                for n in self.nodes.values()
            },
            "in_use": sum(n.leased for n in self.nodes.values() if n.up),
            "lost": len(self.lost),
        }


def make_ray_pool(config: Mapping[str, Any], pool: PoolConfig) -> RaySandboxPool:
    """The registry's builder for `sandbox=ray`: `config` is the `sandbox` section, `pool` the
    root `pool` section (each node's pool)."""
    return RaySandboxPool(RayPoolConfig(**{**config, "pool": pool.model_dump()}))
