"""The sandbox API: what you can do with a sandbox, apart from where it runs.

A `SandboxBackend` (docker/, bwrap/) decides where a sandbox lives and how it starts,
stops and is inspected. A `Sandbox` is what callers use: exec, files, snapshot/reset. Every
operation travels over one long-lived channel to the server inside (`server/`), so the same code
serves both backends.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import hashlib
import io
import tarfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from .channel import Channel, ChannelClosed, ChannelForged, ChannelTimeout
from .errors import Fault, SandboxCrashed, SandboxFileNotFound, SandboxOpError, SandboxUnresponsive

MANAGED_LABEL = "arborl.managed"
DEFAULT_IMAGE = "arborl/base:latest"
#: The env of the harness's own root commands once an agent has acted in a sandbox: tools from
#: the system's directories only. The server's default PATH starts with /usr/local/bin, which
#: an image (a task's Dockerfile) may leave writable to the agent, and a root command finding
#: `rm` there would run the agent's program as root.
ROOT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


class Limits(BaseModel):
    """Resource limits of one sandbox. Zero means "no limit" for the rlimit fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpus: float = Field(1.0, description="CPU share (docker nano_cpus; bwrap: cgroup cpu quota)")
    memory_mb: int = Field(1024, description="memory cap of the whole sandbox incl. tmpfs (memory cgroup)")
    pids: int = Field(512, description="max processes+threads of the whole sandbox (pids cgroup)")
    max_file_mb: int = Field(1024, description="largest single file a command may write (RLIMIT_FSIZE)")
    nofile: int = Field(4096, description="open files per process (RLIMIT_NOFILE)")
    tmp_mb: int = Field(256, description="size of the /tmp tmpfs (docker; bwrap: within disk_mb)")
    disk_mb: int = Field(
        2048,
        description="size of each writable tree besides /tmp (docker: a tmpfs volume per tree, "
        "filled from the image; bwrap: one tmpfs holding all of them)",
    )


class SandboxSpec(BaseModel):
    """What a sandbox should look like. Equal specs share a warm pool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = Field(DEFAULT_IMAGE, description="docker image (bubblewrap backend: the host's /usr)")
    workdir: str = Field("/workspace", description="working directory of commands")
    user: str = Field("agent", description="non-root user commands run as (docker)")
    env: dict[str, str] = Field(default_factory=dict, description="environment of every command")
    network: bool | str = Field(False, description="False: none; True: default bridge; str: named network")
    limits: Limits = Field(default_factory=Limits)
    files: dict[str, str] = Field(default_factory=dict, description="files written at creation")
    setup: tuple[str, ...] = Field((), description="commands run once at creation, before the snapshot")
    reset_paths: tuple[str, ...] = Field(
        ("/workspace", "/home/agent", "/tmp"), description="trees restored in place by reset()"
    )

    def key(self) -> str:
        """A stable hash of the spec (pool key, label value)."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


class ExecResult(BaseModel):
    """The outcome of one command. Output is head+tail truncated to `max_output` per stream."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    truncated: bool = False
    oom_killed: bool = False
    signal: int | None = None
    duration_s: float = 0.0
    stdout_bytes: int = 0
    stderr_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def output(self) -> str:
        """stdout and stderr joined, for showing to a model."""
        return self.stdout + (("\n" if self.stdout else "") + self.stderr if self.stderr else "")


class ResetResult(BaseModel):
    killed: int
    kill_s: float
    restore_s: float
    total_s: float


class SandboxInfo(BaseModel):
    """One sandbox as a listing shows it (`arborl sandbox ls`)."""

    id: str
    backend: str
    status: str
    image: str
    owner_pid: int | None
    owner_alive: bool
    created: float | None
    labels: dict[str, str] = Field(default_factory=dict)


def tar_archive(src: Path | Mapping[str, bytes | str]) -> bytes:
    """A tar archive of a host directory's children, or of a {relative path: content} mapping."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if isinstance(src, Path):
            for child in sorted(src.iterdir()):
                tar.add(child, arcname=child.name)
        else:
            for name, content in src.items():
                raw = content.encode() if isinstance(content, str) else content
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(raw), 0o644, int(time.time())
                tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


class PingHealth:
    """`healthy()` for anything that answers `ping`: a local `Sandbox`, a `RemoteSandbox`."""

    async def ping(self, timeout: float = 5.0) -> dict[str, Any]:
        raise NotImplementedError

    async def healthy(self) -> bool:
        """Whether the sandbox answers a ping within 5 s (any error: it does not)."""
        try:
            await self.ping(timeout=5.0)
        except Exception:
            return False
        return True


class Sandbox(PingHealth):
    """A running sandbox. Use through a pool (`SandboxPool.acquire`) or `async with`."""

    def __init__(self, sandbox_id: str, spec: SandboxSpec, channel: Channel, backend: SandboxBackend) -> None:
        """`channel` is keyed with a secret that only the harness and the server know."""
        self.id = sandbox_id
        self.spec = spec
        self.channel = channel
        self.backend = backend
        self.created_at = time.time()
        self.closed = False
        self.handle: Any = None  # the backend's own object: a container, a process
        self._restore: list[tuple[str, str]] = []
        self._closing: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<Sandbox {self.backend.name}:{self.id[:12]} image={self.spec.image}>"

    async def _call(self, op: str, timeout: float | None = 30.0, **args: Any) -> dict[str, Any]:
        try:
            resp = await self.channel.request({"op": op, **args}, timeout=timeout)
        except ChannelForged as e:
            raise SandboxCrashed(self.id, f"its channel is no longer trustworthy: {e}") from e
        except ChannelClosed as e:
            reason = await self._death_reason(str(e))
            raise SandboxCrashed(self.id, reason, await self.backend.death_fault(self)) from e
        except ChannelTimeout as e:
            if not await self.backend.is_running(self):
                reason = await self.backend.describe_death(self)
                raise SandboxCrashed(self.id, reason, await self.backend.death_fault(self)) from e
            raise SandboxUnresponsive(f"sandbox {self.id[:12]}: {e}; reset or replace it") from e
        if not resp.get("ok"):
            if resp.get("kind") == "not_found":
                raise SandboxFileNotFound(resp["error"])
            raise SandboxOpError(f"{op} failed in sandbox {self.id[:12]}: {resp.get('error')}")
        return resp

    async def _death_reason(self, fallback: str, wait_s: float = 3.0) -> str:
        """Why the server went away. The connection drops a moment before the engine records
        the exit, so give the backend a short while to see the death before describing it."""
        deadline = time.monotonic() + wait_s
        while await self.backend.is_running(self) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return await self.backend.describe_death(self) or fallback

    async def exec(
        self,
        cmd: str | list[str],
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
        stdin: str | None = None,
        max_output: int = 64 * 1024,
    ) -> ExecResult:
        """Run `cmd` (a bash string, or an argv list) and return its result.

        Timeouts kill the command's whole process group and come back as `timed_out=True`;
        they never raise. `user="root"` is for harness setup, never for agent actions.
        """
        resp = await self._call(
            "exec",
            timeout=timeout + 10.0,
            cmd=cmd,
            timeout_s=timeout,
            env={**self.spec.env, **(env or {})},
            workdir=workdir or self.spec.workdir,
            user=user,
            stdin=stdin,
            max_output=max_output,
        )
        resp.pop("ok")
        return ExecResult(**resp)

    async def read_file(self, path: str, max_bytes: int = 64 * 1024 * 1024, user: str | None = None) -> bytes:
        """Read `path` with the agent's permissions (`user="root"`: as root, following no link)."""
        resp = await self._call("read_file", path=path, max_bytes=max_bytes, user=user)
        return base64.b64decode(resp["data"])

    async def write_file(
        self,
        path: str,
        data: bytes | str,
        mode: int | None = None,
        user: str | None = None,
        owner: str | None = None,
    ) -> None:
        """Write `path` as the agent (`user="root"`: as root, following no link; with
        `owner="agent"` the file, and any directory made for it, then belong to the agent)."""
        raw = data.encode() if isinstance(data, str) else data
        args: dict[str, Any] = {
            "path": path,
            "data": base64.b64encode(raw).decode(),
            "user": user,
            "owner": owner,
        }
        if mode is not None:
            args["mode"] = mode
        await self._call("write_file", timeout=120.0, **args)

    async def upload(
        self, src: Path | Mapping[str, bytes | str] | bytes, dest: str, user: str | None = None
    ) -> int:
        """Copy a host directory (or a {relative path: content} mapping, or a tar archive's
        bytes) under `dest`."""
        archive = src if isinstance(src, bytes) else tar_archive(src)
        resp = await self._call(
            "upload", timeout=300.0, dest=dest, tar=base64.b64encode(archive).decode(), user=user
        )
        return int(resp["files"])

    async def download(self, path: str, user: str | None = None) -> bytes:
        """A tar archive of `path` (file or directory), read with the agent's permissions."""
        resp = await self._call("download", timeout=300.0, path=path, user=user)
        return base64.b64decode(resp["tar"])

    async def snapshot(self) -> None:
        """Record the current state of `spec.reset_paths`; `reset()` returns to it."""
        self._restore = await self.backend.snapshot(self)

    async def reset(self) -> ResetResult:
        """Kill every process the episode left and restore the snapshot, in place."""
        start = time.perf_counter()
        resp = await self._call("reset", timeout=60.0, restore=self._restore)
        return ResetResult(
            killed=resp["killed"],
            kill_s=resp["kill_s"],
            restore_s=resp["restore_s"],
            total_s=time.perf_counter() - start,
        )

    async def kill_processes(self) -> int:
        """Kill every process in the sandbox but its server, and restore nothing: a grader
        that reads the agent's files as it left them, with nothing of the agent still running."""
        resp = await self._call("reset", timeout=60.0, restore=[])
        return int(resp["killed"])

    async def ping(self, timeout: float = 5.0) -> dict[str, Any]:
        return await self._call("ping", timeout=timeout)

    async def close(self) -> None:
        """Destroy the sandbox. Every caller waits until it is really gone, and a caller that
        is cancelled (a pool closing while it resets) does not stop the destruction."""
        loop = asyncio.get_running_loop()
        if self._closing is None or (self._closing.get_loop() is not loop and not self._closing.done()):
            self.closed = True
            self.channel.close()
            self._closing = loop.create_task(self.backend.destroy(self))
        await asyncio.shield(self._closing)

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class SandboxBackend(abc.ABC):
    """Where sandboxes run. One folder per backend, named in the registry (`factory.BACKENDS`) by `name`."""

    name: ClassVar[str]

    @abc.abstractmethod
    async def create(self, spec: SandboxSpec, pool_id: str = "") -> Sandbox:
        """Start a sandbox for `spec`, write its files, run its setup, snapshot it."""

    @abc.abstractmethod
    async def destroy(self, sandbox: Sandbox) -> None:
        """Stop and remove the sandbox; never raises for one that is already gone."""

    @abc.abstractmethod
    async def is_running(self, sandbox: Sandbox) -> bool: ...

    @abc.abstractmethod
    async def describe_death(self, sandbox: Sandbox) -> str:
        """Why the sandbox is gone (exit code, OOM, killed), for SandboxCrashed."""

    async def death_fault(self, sandbox: Sandbox) -> Fault:
        """ "agent" when the sandbox's own limits killed it (what its commands did), else "infra"."""
        return "infra"

    @abc.abstractmethod
    async def snapshot(self, sandbox: Sandbox) -> list[tuple[str, str]]:
        """Copy the reset paths aside; returns (live path, copy) pairs the server restores."""

    @abc.abstractmethod
    def list_sandboxes(self) -> list[SandboxInfo]:
        """Every sandbox this backend made on this host, alive or not."""

    def has_image(self, image: str) -> bool:
        """Whether a sandbox of `image` can start here without fetching anything (a pool over
        several hosts places by it). A backend without images runs any spec."""
        return True

    @abc.abstractmethod
    def reap(self, all_sandboxes: bool = False, run: str | None = None) -> list[str]:
        """Remove orphans (their owner process is dead), those of run `run`, or every arborl
        sandbox; returns ids."""

    async def _prepare(self, sandbox: Sandbox) -> None:
        """Shared tail of `create`: spec files, setup commands, snapshot."""
        spec = sandbox.spec
        for path, content in spec.files.items():  # anywhere in the image, then the agent's
            await sandbox.write_file(path, content, user="root", owner="agent")
        for cmd in spec.setup:
            res = await sandbox.exec(cmd, timeout=600.0, user="root")
            if not res.ok:
                await sandbox.close()
                raise SandboxOpError(f"setup command {cmd!r} failed ({res.exit_code}): {res.output[-2000:]}")
        await sandbox.snapshot()
