"""Docker backend: one container per sandbox, through the `docker` SDK.

Each container runs the server (`server/`, bind-mounted read-only from this package) as its
main process under docker-init; the server's socket sits in a per-sandbox host directory
bind-mounted at /run/arborl, which is the whole channel. That directory is root's (the agent
cannot add, move or replace anything in it) and, when the harness is root, a small tmpfs of
its own mounted nosuid,nodev,noexec, so nothing written there can run or fill the host.

Containers are hardened by default: no network, all capabilities dropped but the few the
server needs to run commands as the non-root user and to reset, no-new-privileges,
memory/CPU/pids limits, /tmp as a sized tmpfs, and every other tree the agent writes on a
sized tmpfs volume (filled from the image), so the container's writable layer grows only by
what the harness itself writes as root. Every container carries labels naming its owner
process, so `reap()` finds orphans.

The engine must share this host's filesystem (a local daemon), because of the bind mounts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..base import MANAGED_LABEL, Sandbox, SandboxBackend, SandboxInfo, SandboxSpec
from ..channel import Channel, ChannelTimeout
from ..drop_ids import IN_SANDBOX as DROP_IN_SANDBOX
from ..drop_ids import drop_helper
from ..errors import Fault, SandboxStartError, SandboxUnavailable
from ..images import image_exists
from ..owner import OWNER_PID, owner_alive, owner_labels, reapable
from ..server.wire import write_key

log = logging.getLogger(__name__)

SERVER_DIR = Path(__file__).parents[1] / "server"  # sandboxes/server/
SERVER_HOME_IN_CONTAINER = "/opt/arborl"
SOCKET_DIR_IN_CONTAINER = "/run/arborl"
RUN_DIR_MB = 4  # sockets take no room; the harness's own small files (relay logs) some
# Scratch directories every Debian image leaves world-writable: sized tmpfs, reset with the rest.
SCRATCH_TMPFS = ("/var/tmp", "/run/lock")
# What the in-container server needs: run commands as the agent user (SETUID/SETGID),
# kill anything on reset (KILL), restore snapshots with owners and modes intact.
SERVER_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL"]


class DockerBackendConfig(BaseModel):
    """Docker backend settings (`sandbox=docker` in the Hydra config)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["docker"] = "docker"
    runtime_dir: str = Field("/tmp/arborl-run", description="host dir holding per-sandbox socket dirs")
    start_timeout_s: float = Field(30.0, description="how long a new container may take to answer")
    api_threads: int = Field(16, description="threads for blocking Docker SDK calls")


def _client() -> Any:
    import docker

    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as e:
        raise SandboxUnavailable(
            f"no Docker engine answers ({e}). Start one (`scripts/setup.sh` does), or use the "
            "bubblewrap backend: sandbox=bwrap"
        ) from e
    return client


class DockerBackend(SandboxBackend):
    name = "docker"

    def __init__(self, config: DockerBackendConfig | None = None) -> None:
        self.config = config or DockerBackendConfig()
        self.client = _client()
        self._pool = ThreadPoolExecutor(self.config.api_threads, thread_name_prefix="arborl-docker")
        self.runtime_dir = Path(self.config.runtime_dir)
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        self.runtime_dir.chmod(0o755)
        self.server_dir, self.drop = self._stage()

    def _stage(self) -> tuple[Path, Path | None]:
        """The server's code and the arborl-drop helper, copied into the run directory.

        Containers mount them from there because it is the one path that the harness and the
        engine both see when the harness itself runs in a container (compose.yaml shares it
        at the same path on both sides); the package's own directory exists only inside the
        harness's container. Named by content, so harnesses of other versions can share it.
        """
        files = sorted(SERVER_DIR.glob("*.py"))
        digest = hashlib.sha256(b"".join(f.name.encode() + f.read_bytes() for f in files)).hexdigest()[:16]
        server = self.runtime_dir / f"server-{digest}"
        if not server.is_dir():
            tmp = Path(tempfile.mkdtemp(dir=self.runtime_dir, prefix=".server-"))
            for f in files:
                shutil.copyfile(f, tmp / f.name)
            tmp.chmod(0o755)
            try:
                tmp.rename(server)
            except OSError:  # another harness staged the same version first
                shutil.rmtree(tmp, ignore_errors=True)
        built = drop_helper()
        if built is None:
            return server, None
        drop = self.runtime_dir / built.name
        if not drop.is_file():
            tmp_file = self.runtime_dir / f".{built.name}.{os.getpid()}"
            shutil.copyfile(built, tmp_file)
            tmp_file.chmod(0o755)
            os.replace(tmp_file, drop)
        return server, drop

    # ---- the run directory: the channel's socket, the web stack's relays ------------------
    def _make_run_dir(self, path: Path) -> None:
        path.mkdir(mode=0o755)
        if os.geteuid() != 0:
            return  # cannot mount; the directory is still the harness's, not the agent's
        res = subprocess.run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                f"size={RUN_DIR_MB}m,mode=0755,nosuid,nodev,noexec",
                "arborl-run",
                str(path),
            ],
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            log.warning("cannot mount a tmpfs on %s (%s); using a plain directory", path, res.stderr.strip())

    @staticmethod
    def _drop_run_dir(path: Path) -> None:
        if os.path.ismount(path):
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
        shutil.rmtree(path, ignore_errors=True)

    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, lambda: fn(*args, **kwargs))

    # ---- lifecycle --------------------------------------------------------------------
    @staticmethod
    def _trees(spec: SandboxSpec) -> list[str]:
        """The trees the agent writes that are not already a tmpfs: each gets a sized volume."""
        trees = [p for p in spec.reset_paths if p != "/tmp" and p not in SCRATCH_TMPFS]
        if not any(spec.workdir == p or spec.workdir.startswith(p.rstrip("/") + "/") for p in trees):
            trees.append(spec.workdir)
        return list(dict.fromkeys(trees))

    def _volumes(self, spec: SandboxSpec) -> list[Any]:
        """A sized tmpfs volume per tree, removed with the container (`remove(v=True)`)."""
        from docker.types import DriverConfig, Mount

        opts = {"type": "tmpfs", "device": "tmpfs", "o": f"size={spec.limits.disk_mb}m,nosuid,nodev"}
        return [
            Mount(target=p, source=None, type="volume", driver_config=DriverConfig("local", opts))
            for p in self._trees(spec)
        ]

    def _fill_volumes(self, container: Any, spec: SandboxSpec) -> None:
        """Copy the image's content at each tree into its (empty) volume, owners and modes kept.

        Docker fills a plain volume from the image by itself, but not one with driver options
        (the tmpfs): so the content is read from a container that is created, never started,
        without volumes, and extracted into the running one, where the volume is mounted.
        """
        import docker.errors

        staging = self.client.containers.create(
            spec.image, command=["true"], network_mode="none", labels={MANAGED_LABEL: "1", **owner_labels()}
        )
        try:
            for path in self._trees(spec):
                try:
                    stream, _ = staging.get_archive(path)
                except docker.errors.NotFound:
                    continue
                if not container.put_archive(os.path.dirname(path.rstrip("/")) or "/", stream):
                    raise SandboxStartError(f"cannot fill {path} of {spec.image!r} from the image")
        finally:
            with contextlib.suppress(docker.errors.NotFound):
                staging.remove(force=True)

    def _start_container(self, spec: SandboxSpec, sandbox_id: str, sock_dir: Path, pool_id: str) -> Any:
        import docker.errors

        lim = spec.limits
        rlimits = {"fsize": lim.max_file_mb * 2**20, "nofile": lim.nofile, "core": 0}
        network = "none" if spec.network is False else "bridge" if spec.network is True else spec.network
        labels = {
            MANAGED_LABEL: "1",
            "arborl.sandbox_id": sandbox_id,
            "arborl.spec": spec.key(),
            "arborl.pool": pool_id,
            "arborl.created": f"{time.time():.3f}",
            **owner_labels(),
        }
        drop_args = ["--drop", DROP_IN_SANDBOX] if self.drop else []
        drop_mount = {str(self.drop): {"bind": DROP_IN_SANDBOX, "mode": "ro"}} if self.drop else {}
        try:
            return self.client.containers.run(
                spec.image,
                command=[
                    "python3",
                    "-E",
                    "-s",
                    "-m",
                    "server.main",
                    "--socket",
                    f"{SOCKET_DIR_IN_CONTAINER}/agent.sock",
                    "--own-pid-namespace",
                    "--user",
                    spec.user,
                    "--limits",
                    json.dumps(rlimits),
                    *drop_args,
                ],
                name=f"arborl-{sandbox_id[:16]}",
                working_dir=SERVER_HOME_IN_CONTAINER,
                detach=True,
                init=True,
                user="root",
                labels=labels,
                network_mode=network,
                mem_limit=f"{lim.memory_mb}m",
                memswap_limit=f"{lim.memory_mb}m",
                nano_cpus=int(lim.cpus * 1e9),
                pids_limit=lim.pids,
                cap_drop=["ALL"],
                cap_add=SERVER_CAPS,
                security_opt=["no-new-privileges"],
                tmpfs={
                    "/tmp": f"size={lim.tmp_mb}m,mode=1777,nosuid,nodev",
                    **{p: f"size={lim.tmp_mb}m,mode=1777,nosuid,nodev,noexec" for p in SCRATCH_TMPFS},
                },
                mounts=self._volumes(spec),
                volumes={
                    str(sock_dir): {"bind": SOCKET_DIR_IN_CONTAINER, "mode": "rw"},
                    str(self.server_dir): {"bind": f"{SERVER_HOME_IN_CONTAINER}/server", "mode": "ro"},
                    **drop_mount,
                },
                hostname="sandbox",
            )
        except docker.errors.ImageNotFound as e:
            raise SandboxUnavailable(
                f"image {spec.image!r} does not exist: build it with `arborl sandbox build`"
            ) from e
        except docker.errors.APIError as e:
            raise SandboxStartError(f"docker refused to start {spec.image!r}: {e.explanation or e}") from e

    async def create(self, spec: SandboxSpec, pool_id: str = "") -> Sandbox:
        sandbox_id = uuid.uuid4().hex
        sock_dir = self.runtime_dir / sandbox_id
        key = secrets.token_hex(32)
        await self._run(self._make_run_dir, sock_dir)
        try:
            write_key(str(sock_dir), key)
            container = await self._run(self._start_container, spec, sandbox_id, sock_dir, pool_id)
        except BaseException:
            await self._run(self._drop_run_dir, sock_dir)
            raise
        sandbox = Sandbox(sandbox_id, spec, Channel(str(sock_dir / "agent.sock"), key), self)
        sandbox.handle = container
        try:
            await sandbox.channel.wait_ready(self.config.start_timeout_s)
            await self._run(self._fill_volumes, container, spec)
            res = await sandbox.exec(
                ["install", "-d", "-o", spec.user, "-g", spec.user, spec.workdir], user="root", workdir="/"
            )
            if not res.ok:
                raise SandboxStartError(f"cannot create workdir {spec.workdir}: {res.output}")
            await self._prepare(sandbox)
        except ChannelTimeout as e:
            reason = await self.describe_death(sandbox)
            await sandbox.close()
            raise SandboxStartError(f"container for {spec.image!r} did not come up: {reason}") from e
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    def _remove(self, sandbox: Sandbox) -> None:
        import docker.errors

        with contextlib.suppress(docker.errors.NotFound):
            sandbox.handle.remove(force=True, v=True)
        self._drop_run_dir(self.runtime_dir / sandbox.id)

    async def destroy(self, sandbox: Sandbox) -> None:
        await self._run(self._remove, sandbox)

    def _state(self, sandbox: Sandbox) -> dict[str, Any] | None:
        import docker.errors

        try:
            sandbox.handle.reload()
        except docker.errors.NotFound:
            return None
        return sandbox.handle.attrs["State"]

    async def is_running(self, sandbox: Sandbox) -> bool:
        state = await self._run(self._state, sandbox)
        return bool(state and state.get("Running"))

    async def describe_death(self, sandbox: Sandbox) -> str:
        state = await self._run(self._state, sandbox)
        if state is None:
            return "container was removed"
        if state.get("Running"):
            return "container is running but its server does not answer"
        why = "OOM-killed" if state.get("OOMKilled") else f"exit code {state.get('ExitCode')}"
        return f"container {state.get('Status')} ({why}){': ' + state['Error'] if state.get('Error') else ''}"

    async def death_fault(self, sandbox: Sandbox) -> Fault:
        # The container's memory cgroup killed it: what ran inside filled it. Removed, or
        # exited for any other reason (docker kill, the engine stopping): not the agent's
        # doing, since its commands can neither signal the server nor stop the container.
        state = await self._run(self._state, sandbox)
        return "agent" if state is not None and state.get("OOMKilled") else "infra"

    async def snapshot(self, sandbox: Sandbox) -> list[tuple[str, str]]:
        """The reset paths, plus whatever else the agent could write (found by the server)."""
        covered = [*sandbox.spec.reset_paths, *SCRATCH_TMPFS]
        extra = (await sandbox._call("writable", timeout=120.0, covered=covered))["paths"]
        if extra:
            log.info("%s: the agent can also write %s; reset restores them too", sandbox, extra)
        resp = await sandbox._call("snapshot", timeout=300.0, paths=[*covered, *extra])
        return [(live, copy) for live, copy in resp["restore"]]

    # ---- listing and reaping ------------------------------------------------------------
    def _containers(self) -> list[Any]:
        # Other harnesses on this engine remove containers while the list is inspected.
        return list(
            self.client.containers.list(all=True, filters={"label": MANAGED_LABEL}, ignore_removed=True)
        )

    def list_sandboxes(self) -> list[SandboxInfo]:
        out = []
        for c in self._containers():
            labels = c.labels
            out.append(
                SandboxInfo(
                    id=labels.get("arborl.sandbox_id", c.id),
                    backend=self.name,
                    status=c.status,
                    image=",".join(c.image.tags) if c.image and c.image.tags else c.attrs["Config"]["Image"],
                    owner_pid=int(labels[OWNER_PID]) if labels.get(OWNER_PID, "").isdigit() else None,
                    owner_alive=owner_alive(labels),
                    created=float(labels.get("arborl.created", 0) or 0),
                    labels=labels,
                )
            )
        return out

    def has_image(self, image: str) -> bool:
        return image_exists(self.client, image)

    def reap(self, all_sandboxes: bool = False, run: str | None = None) -> list[str]:
        import docker.errors

        removed = []
        for c in self._containers():
            if reapable(c.labels, all_sandboxes, run):
                try:
                    c.remove(force=True, v=True)
                except docker.errors.NotFound:
                    pass
                except docker.errors.APIError as e:
                    # another process's reaper got there first ("removal ... already in progress")
                    if e.status_code != 409:
                        raise
                sid = c.labels.get("arborl.sandbox_id", "")
                if sid:
                    self._drop_run_dir(self.runtime_dir / sid)
                removed.append(sid or c.id)
        return removed
