"""Bubblewrap backend: bubblewrap namespaces, for machines without a container engine.

Each sandbox is one `bwrap` process running the same server (`server/`) as the Docker
backend, so the Sandbox API and most tests are shared. The harness must be root: the server
then runs as root (with only the capabilities it needs) and the agent's commands as a uid of
their own, so the agent can neither signal, trace nor impersonate the server, nor reach its
socket. A sandbox gets:
- its own pid/ipc/uts/net namespaces (no network at all: `network=True` is refused, since
  bwrap could only share the host's, loopback and abstract sockets included);
- a read-only view of the host's /usr and /etc (with an /etc/passwd naming the agent) and
  nothing else of the host;
- writable trees only where reset restores them (the reset paths, the workdir, /var/tmp,
  /dev/shm), all on one tmpfs of `disk_mb`, mounted nosuid,nodev;
- a memory, pids and CPU cgroup for the sandbox as a whole (`cgroups.py`), plus file-size,
  open-file and core rlimits per process.

The host's Python and tools stand in for an image: `spec.image` is only a pool key here.
Snapshots are taken by the host into a directory the sandbox sees read-only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..base import MANAGED_LABEL, Sandbox, SandboxBackend, SandboxInfo, SandboxSpec
from ..channel import Channel, ChannelTimeout
from ..drop_ids import IN_SANDBOX as DROP_IN_SANDBOX
from ..drop_ids import drop_helper
from ..errors import Fault, SandboxStartError, SandboxUnavailable
from ..owner import OWNER_PID, is_same_process, owner_alive, owner_labels, process_start, reapable
from ..server.wire import write_key
from .cgroups import CgroupError, SandboxCgroups, leftover_ids
from .seccomp import SeccompUnavailable, filter_program, program_fd
from .uids import UidAllocator

SERVER_DIR = Path(__file__).parents[1] / "server"  # sandboxes/server/
SNAPSHOT_IN_SANDBOX = "/.arborl/snapshot"
SCRATCH = ("/var/tmp", "/dev/shm")  # writable in any Debian system: kept, sized and reset
MQUEUE = "/dev/mqueue"  # the sandbox's own POSIX message queues: the server clears it at reset
# What the server needs: run commands as the agent (SETUID/SETGID), kill anything on reset
# (KILL), restore snapshots with owners and modes intact (CHOWN, DAC_OVERRIDE, FOWNER).
SERVER_CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_SETUID", "CAP_SETGID", "CAP_KILL"]


class BwrapBackendConfig(BaseModel):
    """Bubblewrap backend settings (`sandbox=bwrap` in the Hydra config)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["bwrap"] = "bwrap"
    runtime_dir: str = Field("/tmp/arborl-bwrap", description="host dir holding each sandbox's files")
    python: str = Field("/usr/bin/python3", description="interpreter inside the sandbox (host path)")
    start_timeout_s: float = Field(15.0, description="how long a new sandbox may take to answer")
    agent_uid: int = Field(
        64000,
        description="first host uid (and gid) the agents' commands run as, one per sandbox; own none "
        "of the range to anyone",
    )
    agent_uid_count: int = Field(1024, ge=1, description="how many uids from agent_uid sandboxes may take")


def _base_argv() -> list[str]:
    return [
        "bwrap",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
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
    ]


def _bwrap_works() -> str | None:
    """None if bubblewrap can make a sandbox here, else the reason."""
    if not shutil.which("bwrap"):
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    if os.geteuid() != 0:
        return (
            "the harness is not root: without root the agent's commands would share the server's "
            "uid and could take over its channel; run as root or use sandbox=docker"
        )
    res = subprocess.run(
        [*_base_argv(), "--cap-drop", "ALL", "/usr/bin/true"], capture_output=True, text=True, timeout=30
    )
    return None if res.returncode == 0 else f"bwrap cannot create namespaces here: {res.stderr.strip()}"


def _umount(path: Path) -> None:
    if os.path.ismount(path):
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


class BwrapBackend(SandboxBackend):
    name = "bwrap"

    def __init__(self, config: BwrapBackendConfig | None = None) -> None:
        self.config = config or BwrapBackendConfig()
        reason = _bwrap_works()
        if reason:
            raise SandboxUnavailable(f"bubblewrap sandbox backend unavailable: {reason}")
        self.runtime_dir = Path(self.config.runtime_dir)
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        self.runtime_dir.chmod(0o755)
        self.uids = UidAllocator(
            self.runtime_dir / ".uids", self.config.agent_uid, self.config.agent_uid_count
        )
        try:
            filter_program()
        except SeccompUnavailable as e:
            raise SandboxUnavailable(f"bubblewrap sandbox backend unavailable: {e}") from e

    @staticmethod
    def _writable(spec: SandboxSpec) -> list[str]:
        """Every tree the agent may write: the reset paths, the workdir, the scratch dirs."""
        paths = list(dict.fromkeys(spec.reset_paths))
        if not any(spec.workdir == p or spec.workdir.startswith(p.rstrip("/") + "/") for p in paths):
            paths.append(spec.workdir)
        return [*paths, *(p for p in SCRATCH if p not in paths)]

    def _identity_files(self, root: Path, uid: int) -> None:
        """The host's passwd and group, plus the agent, so tools that look the user up work."""
        for name, line in (
            ("passwd", f"agent:x:{uid}:{uid}:arborl agent:/home/agent:/bin/bash\n"),
            ("group", f"agent:x:{uid}:\n"),
        ):
            host = Path("/etc", name).read_text()
            (root / name).write_text(host + ("" if host.endswith("\n") else "\n") + line)

    def _argv(
        self,
        spec: SandboxSpec,
        root: Path,
        writable: list[str],
        cgroups: SandboxCgroups,
        uid: int,
        seccomp: int,
    ) -> list[str]:
        lim = spec.limits
        rlimits = {"fsize": lim.max_file_mb * 2**20, "nofile": lim.nofile, "core": 0}
        argv = [
            *_base_argv(),
            "--hostname",
            "sandbox",
            # bwrap makes missing mount points 0700 when run as root: the agent must see these
            *(
                a
                for d in ("/home", "/opt", "/run", "/sys", "/sys/fs", "/sys/fs/cgroup", "/var")
                for a in ("--perms", "0755", "--dir", d)
            ),
            "--ro-bind",
            "/etc",
            "/etc",
            "--ro-bind",
            str(root / "passwd"),
            "/etc/passwd",
            "--ro-bind",
            str(root / "group"),
            "/etc/group",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--mqueue",
            MQUEUE,
            "--bind",
            str(root / "sock"),
            "/run/arborl",
            "--ro-bind",
            str(SERVER_DIR),
            "/opt/arborl/server",
            "--ro-bind",
            str(root / "snap"),
            SNAPSHOT_IN_SANDBOX,
        ]
        drop = drop_helper()
        if drop:
            argv += ["--ro-bind", str(drop), DROP_IN_SANDBOX]
        for host, inside in cgroups.mounts.items():
            argv += ["--ro-bind", host, inside]
        for i, path in enumerate(writable):
            argv += ["--bind", str(root / "fs" / str(i)), path]
        argv += ["--seccomp", str(seccomp)]
        argv += ["--cap-drop", "ALL"]  # bwrap run by root keeps every capability otherwise
        for cap in SERVER_CAPS:
            argv += ["--cap-add", cap]
        argv += [
            "--chdir",
            "/opt/arborl",
            self.config.python,
            "-E",
            "-s",
            "-m",
            "server.main",
            "--socket",
            "/run/arborl/agent.sock",
            "--own-pid-namespace",
            "--user",
            str(uid),
            "--limits",
            json.dumps(rlimits),
            *(["--drop", DROP_IN_SANDBOX] if drop else []),
        ]
        return argv

    def _layout(self, spec: SandboxSpec, root: Path, writable: list[str], uid: int) -> None:
        """The sandbox's host directories; its writable trees on one sized tmpfs."""
        root.mkdir(mode=0o755)
        for sub in ("sock", "snap", "fs"):
            (root / sub).mkdir(mode=0o700 if sub == "snap" else 0o755)
        # The writable trees, and the socket's directory (which only root writes), each on a
        # sized tmpfs: nothing written there can fill the host's disk or run setuid on it.
        for sub, opts in (
            ("fs", f"size={spec.limits.disk_mb}m,nosuid,nodev"),
            ("sock", "size=1m,nosuid,nodev,noexec"),
        ):
            res = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"{opts},mode=0755", f"arborl-{sub}", str(root / sub)],
                capture_output=True,
                text=True,
            )
            if res.returncode != 0:
                raise SandboxStartError(f"cannot mount a sized tmpfs on {root / sub}: {res.stderr.strip()}")
        for i, path in enumerate(writable):
            d = root / "fs" / str(i)
            d.mkdir(mode=0o1777 if path in ("/tmp", *SCRATCH) else 0o755)
            d.chmod(0o1777 if path in ("/tmp", *SCRATCH) else 0o755)
            os.chown(d, uid, uid)
        self._identity_files(root, uid)

    async def create(self, spec: SandboxSpec, pool_id: str = "") -> Sandbox:
        if spec.network is not False:
            raise SandboxUnavailable(
                "the bubblewrap backend cannot give a sandbox a network of its own (bwrap could only share "
                "the host's, loopback and abstract sockets included): use sandbox=docker for network=True"
            )
        sandbox_id = uuid.uuid4().hex
        root = self.runtime_dir / sandbox_id
        writable = self._writable(spec)
        key = secrets.token_hex(32)
        cgroups = SandboxCgroups(sandbox_id)
        uid = self.uids.take(sandbox_id)
        meta = {
            MANAGED_LABEL: "1",
            "arborl.sandbox_id": sandbox_id,
            "arborl.spec": spec.key(),
            "arborl.pool": pool_id,
            "arborl.created": f"{time.time():.3f}",
            "arborl.image": spec.image,
            "arborl.agent_uid": str(uid),
            **owner_labels(),
        }
        try:
            await asyncio.to_thread(self._layout, spec, root, writable, uid)
            write_key(str(root / "sock"), key)
            cgroups.create(spec.limits.memory_mb, spec.limits.pids, spec.limits.cpus)
        except CgroupError as e:
            await asyncio.to_thread(self._remove_dirs, root)
            self.uids.release(uid, sandbox_id)
            raise SandboxUnavailable(f"bubblewrap sandbox backend cannot bound this sandbox: {e}") from e
        except BaseException:
            await asyncio.to_thread(self._remove_dirs, root)
            self.uids.release(uid, sandbox_id)
            raise
        env = {"PATH": "/usr/bin:/bin", "HOME": "/home/agent", "LANG": "C.UTF-8"}
        log = open(root / "bwrap.log", "wb")  # noqa: SIM115 - handed to the child, closed below
        seccomp = program_fd()
        try:
            proc = subprocess.Popen(
                self._argv(spec, root, writable, cgroups, uid, seccomp),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                pass_fds=(seccomp,),
                preexec_fn=cgroups.join,  # only os.open/os.write: no lock a thread could hold
            )
        except BaseException:
            await asyncio.to_thread(cgroups.remove)
            await asyncio.to_thread(self._remove_dirs, root)
            self.uids.release(uid, sandbox_id)
            raise
        finally:
            log.close()
            os.close(seccomp)
        meta["arborl.bwrap_pid"] = str(proc.pid)
        meta["arborl.bwrap_start"] = process_start(proc.pid) or ""
        (root / "meta.json").write_text(json.dumps(meta))
        sandbox = Sandbox(sandbox_id, spec, Channel(str(root / "sock" / "agent.sock"), key), self)
        sandbox.handle = (proc, root, writable, cgroups, uid)
        try:
            await sandbox.channel.wait_ready(self.config.start_timeout_s)
            await self._prepare(sandbox)
            covered = [*writable, MQUEUE]
            leaks = (await sandbox._call("writable", timeout=120.0, covered=covered))["paths"]
            if leaks:
                raise SandboxStartError(f"the agent could write {leaks}, which reset would not restore")
        except ChannelTimeout as e:
            reason = await self.describe_death(sandbox)
            await sandbox.close()
            raise SandboxStartError(f"bubblewrap sandbox did not come up: {reason}") from e
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    @staticmethod
    def _remove_dirs(root: Path) -> None:
        _umount(root / "fs")
        _umount(root / "sock")
        shutil.rmtree(root, ignore_errors=True)

    async def destroy(self, sandbox: Sandbox) -> None:
        proc, root, _, cgroups, uid = sandbox.handle
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        await asyncio.to_thread(proc.wait)
        await asyncio.to_thread(cgroups.remove)
        await asyncio.to_thread(self._remove_dirs, root)
        self.uids.release(uid, sandbox.id)  # its processes died with the sandbox's pid namespace

    async def is_running(self, sandbox: Sandbox) -> bool:
        return bool(sandbox.handle[0].poll() is None)

    async def describe_death(self, sandbox: Sandbox) -> str:
        proc, root = sandbox.handle[:2]
        code = proc.poll()
        if code is None:
            return "bwrap is running but its server does not answer"
        log = (
            (root / "bwrap.log").read_text(errors="replace")[-1000:] if (root / "bwrap.log").exists() else ""
        )
        return f"bwrap exited with {code}{': ' + log.strip() if log.strip() else ''}"

    async def death_fault(self, sandbox: Sandbox) -> Fault:
        # The sandbox's memory cgroup OOM-killed something: its own processes filled it. The
        # agent cannot signal bwrap or the server (another uid, another pid namespace).
        return "agent" if sandbox.handle[3].oom_kills() > 0 else "infra"

    async def snapshot(self, sandbox: Sandbox) -> list[tuple[str, str]]:
        _, root, writable, _, _ = sandbox.handle

        def copy() -> list[tuple[str, str]]:
            pairs = []
            for i, path in enumerate(writable):
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
            running = is_same_process(int(meta.get("arborl.bwrap_pid", 0)), meta.get("arborl.bwrap_start"))
            infos.append(
                SandboxInfo(
                    id=meta["arborl.sandbox_id"],
                    backend=self.name,
                    status="running" if running else "exited",
                    image=meta.get("arborl.image", "bwrap"),
                    owner_pid=int(meta.get(OWNER_PID, 0)) or None,
                    owner_alive=owner_alive(meta),
                    created=float(meta.get("arborl.created", 0)),
                    labels=meta,
                )
            )
        return infos

    def reap(self, all_sandboxes: bool = False, run: str | None = None) -> list[str]:
        removed = []
        for root, meta in self._entries():
            if reapable(meta, all_sandboxes, run):
                # Only while the pid is still that bwrap: a dead sandbox's pid may have been
                # reused by now, by a process group leader such as dockerd (started with
                # setsid), which a blind killpg took down. The cgroup kills the rest.
                pid = int(meta.get("arborl.bwrap_pid", 0))
                if is_same_process(pid, meta.get("arborl.bwrap_start")):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, signal.SIGKILL)
                SandboxCgroups(meta["arborl.sandbox_id"]).remove()
                self._remove_dirs(root)
                if str(meta.get("arborl.agent_uid", "")).isdigit():  # its owner may be alive
                    self.uids.release(int(meta["arborl.agent_uid"]), meta["arborl.sandbox_id"])
                removed.append(meta["arborl.sandbox_id"])
        # cgroups and uids whose sandbox directory is already gone (a harness killed mid-create)
        known = {meta["arborl.sandbox_id"] for _, meta in self._entries()}
        self.uids.release_all_but(known)
        if all_sandboxes:
            for sid in leftover_ids() - known:
                SandboxCgroups(sid).remove()
        return removed
