"""`RemoteSandbox`: a sandbox on another node, as an env uses one.

Each call of the episode goes, as a Ray actor call, to the one node holding the sandbox
(`node.SandboxNode.call`), which runs it over that node's local channel. Errors come back
as the sandbox layer's own typed errors; a node or actor that is gone becomes
`SandboxCrashed` with fault "infra": the episode is retried elsewhere, never scored.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ray import exceptions as rx

from ..base import ExecResult, PingHealth, ResetResult, SandboxSpec, tar_archive
from ..errors import SandboxCrashed

if TYPE_CHECKING:
    from ray.actor import ActorHandle

#: What Ray raises when the actor, its worker or its node is gone (or cannot be reached).
NODE_LOST: tuple[type[BaseException], ...] = (
    rx.RayActorError,  # ActorDiedError, ActorUnavailableError
    rx.WorkerCrashedError,
    rx.NodeDiedError,
    rx.ObjectLostError,
    rx.ActorUnschedulableError,
)


def cause_of(error: rx.RayTaskError) -> BaseException:
    """The exception the actor's method raised, as it was raised (its type and fault intact)."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error


class NodeRef(Protocol):
    """What a `RemoteSandbox` needs of the node holding it."""

    node_id: str
    host: str
    actor: ActorHandle


class Placement(Protocol):
    """What a `RemoteSandbox` needs of its pool."""

    def is_live(self, node: NodeRef) -> bool: ...
    def node_lost(self, node: NodeRef, error: BaseException) -> None: ...
    def checkin(self, sb: RemoteSandbox, broken: bool = False) -> None: ...


class RemoteSandbox(PingHealth):
    """A leased sandbox on `node`; the same calls as `Sandbox` for what envs do with one."""

    def __init__(
        self, pool: Placement, node: NodeRef, lease: str, sandbox_id: str, spec: SandboxSpec
    ) -> None:
        self.pool = pool
        self.node = node
        self.lease = lease
        self.id = sandbox_id
        self.spec = spec
        self.returned = False  # given back to the pool (set by the pool's checkin)

    def __repr__(self) -> str:
        return f"<RemoteSandbox {self.id[:12]} on {self.node.host}:{self.node.node_id[:8]}>"

    @property
    def node_id(self) -> str:
        return self.node.node_id

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        where = f"its node {self.node.host} ({self.node.node_id[:12]})"
        if not self.pool.is_live(self.node):
            raise SandboxCrashed(self.id, f"{where} was lost; retry the episode on another node")
        try:
            return await self.node.actor.call.remote(self.lease, method, args, kwargs)
        except rx.RayTaskError as e:
            raise cause_of(e) from None
        except NODE_LOST as e:
            self.pool.node_lost(self.node, e)
            raise SandboxCrashed(
                self.id, f"{where} was lost ({type(e).__name__}); retry the episode on another node"
            ) from e

    async def exec(self, cmd: str | list[str], **kwargs: Any) -> ExecResult:
        """`Sandbox.exec` on the node (same arguments)."""
        result: ExecResult = await self._call("exec", cmd, **kwargs)
        return result

    async def read_file(self, path: str, **kwargs: Any) -> bytes:
        data: bytes = await self._call("read_file", path, **kwargs)
        return data

    async def write_file(self, path: str, data: bytes | str, **kwargs: Any) -> None:
        await self._call("write_file", path, data, **kwargs)

    async def upload(
        self, src: Path | Mapping[str, bytes | str] | bytes, dest: str, user: str | None = None
    ) -> int:
        """Copy a directory of this host (or a mapping, or a tar archive) under `dest`: the
        archive is made here, where the files are, and unpacked on the node."""
        archive = src if isinstance(src, bytes) else tar_archive(src)
        files: int = await self._call("upload", archive, dest, user=user)
        return files

    async def download(self, path: str, user: str | None = None) -> bytes:
        data: bytes = await self._call("download", path, user=user)
        return data

    async def reset(self) -> ResetResult:
        """Kill every process of the episode and restore the snapshot, in place on the node."""
        result: ResetResult = await self._call("reset")
        return result

    async def kill_processes(self) -> int:
        """Kill every process in the sandbox but its server, restoring nothing (what a grader
        does before it reads the agent's work), on the node."""
        killed: int = await self._call("kill_processes")
        return killed

    async def ping(self, timeout: float = 5.0) -> dict[str, Any]:
        reply: dict[str, Any] = await self._call("ping", timeout=timeout)
        return reply

    async def close(self) -> None:
        """Give the sandbox back to be destroyed (not reset): what `Sandbox.close` means."""
        self.pool.checkin(self, broken=True)

    async def __aenter__(self) -> RemoteSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
