"""Local backend: bubblewrap namespaces, for machines without a container engine.

Each sandbox is one `bwrap` process running the same `agent_server.py` as the Docker
backend, so the Sandbox API and most tests are shared. It gets: no network (its own empty
net namespace), its own pid/ipc/uts namespaces, a read-only view of the host's /usr and
/etc and nothing else of the host, writable host directories only for its `reset_paths`
and workdir, rlimits for memory (address space), processes, file size and open files, and
no capabilities. When the harness runs as root, bwrap runs as `nobody`, so even a path that
leaked in could not be written and RLIMIT_NPROC applies.

The host's Python and tools stand in for an image: `spec.image` is only a pool key here.
Snapshots are taken by the host into a directory the sandbox sees read-only, so a command
cannot tamper with the state that the next reset restores.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import MANAGED_LABEL, Sandbox, SandboxBackend, SandboxInfo, SandboxSpec
from .channel import Channel, ChannelTimeout
from .errors import SandboxStartError, SandboxUnavailable
from .owner import OWNER_PID, owner_alive, owner_labels

SERVER_SOURCE = Path(__file__).with_name("agent_server.py")
NOBODY = 65534
SANDBOX_UID = 1000
SNAPSHOT_IN_SANDBOX = "/.arborl/snapshot"


class LocalBackendConfig(BaseModel):
    """Local (bubblewrap) backend settings (`sandbox=local` in the Hydra config)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["local"] = "local"
    runtime_dir: str = Field("/tmp/arborl-local", description="host dir holding each sandbox's files")
    python: str = Field("/usr/bin/python3", description="interpreter inside the sandbox (host path)")
    start_timeout_s: float = Field(15.0, description="how long a new sandbox may take to answer")


def _bwrap_works() -> str | None:
    """None if bubblewrap can make a sandbox here, else the reason."""
    if not shutil.which("bwrap"):
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    probe = [
        "bwrap",
        "--unshare-all",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "/usr/bin/true",
    ]
    res = subprocess.run(_as_nobody(probe), capture_output=True, text=True, timeout=30)
    return None if res.returncode == 0 else f"bwrap cannot create namespaces here: {res.stderr.strip()}"


def _as_nobody(argv: list[str]) -> list[str]:
    if os.getuid() != 0:
        return argv
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", *argv]


class LocalBackend(SandboxBackend):
    name = "local"

    def __init__(self, config: LocalBackendConfig | None = None) -> None:
        self.config = config or LocalBackendConfig()
        reason = _bwrap_works()
        if reason:
            raise SandboxUnavailable(f"local sandbox backend unavailable: {reason}")
        self.runtime_dir = Path(self.config.runtime_dir)
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        self.runtime_dir.chmod(0o755)

    def _give(self, path: Path) -> None:
        if os.getuid() == 0:
            os.chown(path, NOBODY, NOBODY)

    def _mounts(self, spec: SandboxSpec) -> list[str]:
        # Writable trees: each reset path, and the workdir unless it lies inside one.
        paths = list(dict.fromkeys(spec.reset_paths))
        if not any(spec.workdir == p or spec.workdir.startswith(p.rstrip("/") + "/") for p in paths):
            paths.append(spec.workdir)
        return paths

    def _argv(self, spec: SandboxSpec, root: Path, writable: list[str]) -> list[str]:
        lim = spec.limits
        rlimits = {
            "as": lim.memory_mb * 2**20,
            "nproc": lim.pids,
            "fsize": lim.max_file_mb * 2**20,
            "nofile": lim.nofile,
            "core": 0,
        }
        argv = [
            "bwrap",
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--hostname",
            "sandbox",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
            "--ro-bind",
            "/usr",
            "/usr",
            "--ro-bind",
            "/etc",
            "/etc",
            "--symlink",
            "usr/bin",
            "/bin",
            "--symlink",
            "usr/sbin",
            "/sbin",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/run",
            "--tmpfs",
            "/var",
            "--bind",
            str(root / "sock"),
            "/run/arborl",
            "--ro-bind",
            str(SERVER_SOURCE),
            "/opt/arborl/agent_server.py",
            "--ro-bind",
            str(root / "snap"),
            SNAPSHOT_IN_SANDBOX,
        ]
        if spec.network is not False:
            argv.insert(2, "--share-net")
        for i, path in enumerate(writable):
            argv += ["--bind", str(root / "fs" / str(i)), path]
        argv += [
            "--clearenv",
            "--setenv",
            "HOME",
            "/home/agent",
            "--setenv",
            "PATH",
            "/usr/bin:/bin",
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--chdir",
            "/",
            self.config.python,
            "/opt/arborl/agent_server.py",
            "--socket",
            "/run/arborl/agent.sock",
            "--own-pid-namespace",  # --unshare-all gives it one
            "--limits",
            json.dumps(rlimits),
        ]
        return _as_nobody(argv)

    async def create(self, spec: SandboxSpec, pool_id: str = "") -> Sandbox:
        sandbox_id = uuid.uuid4().hex
        root = self.runtime_dir / sandbox_id
        writable = self._mounts(spec)
        for sub in ["sock", "snap", *(f"fs/{i}" for i in range(len(writable)))]:
            (root / sub).mkdir(parents=True, mode=0o755)
        for p in [root, root / "sock", root / "fs", *(root / "fs" / str(i) for i in range(len(writable)))]:
            self._give(p)
        meta = {
            MANAGED_LABEL: "1",
            "arborl.sandbox_id": sandbox_id,
            "arborl.spec": spec.key(),
            "arborl.pool": pool_id,
            "arborl.created": f"{time.time():.3f}",
            "arborl.image": spec.image,
            **owner_labels(),
        }
        log = open(root / "bwrap.log", "wb")  # noqa: SIM115 - handed to the child, closed below
        try:
            proc = subprocess.Popen(
                self._argv(spec, root, writable),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        meta["arborl.bwrap_pid"] = str(proc.pid)
        (root / "meta.json").write_text(json.dumps(meta))
        sandbox = Sandbox(sandbox_id, spec, Channel(str(root / "sock" / "agent.sock")), self)
        sandbox.handle = (proc, root, writable)
        try:
            await sandbox.channel.wait_ready(self.config.start_timeout_s)
            await self._prepare(sandbox)
        except ChannelTimeout as e:
            reason = await self.describe_death(sandbox)
            await sandbox.close()
            raise SandboxStartError(f"local sandbox did not come up: {reason}") from e
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    async def destroy(self, sandbox: Sandbox) -> None:
        proc, root, _ = sandbox.handle
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        await asyncio.to_thread(proc.wait)
        await asyncio.to_thread(shutil.rmtree, root, True)

    async def is_running(self, sandbox: Sandbox) -> bool:
        return bool(sandbox.handle[0].poll() is None)

    async def describe_death(self, sandbox: Sandbox) -> str:
        proc, root, _ = sandbox.handle
        code = proc.poll()
        if code is None:
            return "bwrap is running but its server does not answer"
        log = (
            (root / "bwrap.log").read_text(errors="replace")[-1000:] if (root / "bwrap.log").exists() else ""
        )
        return f"bwrap exited with {code}{': ' + log.strip() if log.strip() else ''}"

    async def snapshot(self, sandbox: Sandbox) -> list[tuple[str, str]]:
        _, root, writable = sandbox.handle

        def copy() -> list[tuple[str, str]]:
            pairs = []
            for i, path in enumerate(writable):
                if path not in sandbox.spec.reset_paths:
                    continue
                target = root / "snap" / str(i)
                if target.exists():
                    shutil.rmtree(target)
                subprocess.run(["cp", "-a", "--", str(root / "fs" / str(i)), str(target)], check=True)
                pairs.append((path, f"{SNAPSHOT_IN_SANDBOX}/{i}"))
            return pairs

        return await asyncio.to_thread(copy)

    # ---- listing and reaping ------------------------------------------------------------
    def _entries(self) -> list[tuple[Path, dict[str, Any]]]:
        out = []
        for root in self.runtime_dir.iterdir() if self.runtime_dir.exists() else []:
            with contextlib.suppress(OSError, ValueError):
                out.append((root, json.loads((root / "meta.json").read_text())))
        return out

    def list_sandboxes(self) -> list[SandboxInfo]:
        infos = []
        for _root, meta in self._entries():
            pid = int(meta.get("arborl.bwrap_pid", 0))
            running = pid > 0 and Path(f"/proc/{pid}").exists()
            infos.append(
                SandboxInfo(
                    id=meta["arborl.sandbox_id"],
                    backend=self.name,
                    status="running" if running else "exited",
                    image=meta.get("arborl.image", "local"),
                    owner_pid=int(meta.get(OWNER_PID, 0)) or None,
                    owner_alive=owner_alive(meta),
                    created=float(meta.get("arborl.created", 0)),
                    labels=meta,
                )
            )
        return infos

    def reap(self, all_sandboxes: bool = False) -> list[str]:
        removed = []
        for root, meta in self._entries():
            if all_sandboxes or not owner_alive(meta):
                pid = int(meta.get("arborl.bwrap_pid", 0))
                if pid > 0:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, signal.SIGKILL)
                shutil.rmtree(root, ignore_errors=True)
                removed.append(meta["arborl.sandbox_id"])
        return removed
