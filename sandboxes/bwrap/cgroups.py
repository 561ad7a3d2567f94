"""Host-side cgroups for the bubblewrap backend: memory, pids and CPU bounded per sandbox.

Rlimits bound one process at a time (three 450 MB processes pass a 600 MB RLIMIT_AS); a
cgroup bounds the sandbox as a whole, like Docker's. cgroup v1 (one hierarchy per
controller, as on this project's machines) and v2 (one unified hierarchy) are both handled.
Every process of the sandbox joins before bwrap runs (`join`, from the child's pre-exec).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "arborl"


class CgroupError(OSError):
    """The sandbox's cgroups could not be made (no cgroupfs, not root, no controller)."""


def _v2() -> bool:
    return (ROOT / "cgroup.controllers").exists()


class SandboxCgroups:
    def __init__(self, sandbox_id: str) -> None:
        if _v2():
            self.dirs = {"unified": ROOT / PARENT / sandbox_id}
        else:
            self.dirs = {c: ROOT / c / PARENT / sandbox_id for c in ("memory", "pids", "cpu")}

    @property
    def mounts(self) -> dict[str, str]:
        """Host directory -> where the sandbox sees it (read-only), for its own accounting."""
        if "unified" in self.dirs:
            return {str(self.dirs["unified"]): "/sys/fs/cgroup"}
        return {
            str(self.dirs["memory"]): "/sys/fs/cgroup/memory",
            str(self.dirs["pids"]): "/sys/fs/cgroup/pids",
        }

    def create(self, memory_mb: int, pids: int, cpus: float) -> None:
        limit = memory_mb * 2**20
        quota = max(1000, int(cpus * 100_000))
        try:
            if "unified" in self.dirs:
                parent = self.dirs["unified"].parent
                parent.mkdir(exist_ok=True)
                with contextlib.suppress(OSError):
                    (ROOT / "cgroup.subtree_control").write_text("+memory +pids +cpu")
                (parent / "cgroup.subtree_control").write_text("+memory +pids +cpu")
                d = self.dirs["unified"]
                d.mkdir()
                (d / "memory.max").write_text(str(limit))
                with contextlib.suppress(FileNotFoundError):
                    (d / "memory.swap.max").write_text("0")
                (d / "pids.max").write_text(str(pids))
                (d / "cpu.max").write_text(f"{quota} 100000")
            else:
                for d in self.dirs.values():
                    d.mkdir(parents=True)
                mem = self.dirs["memory"]
                (mem / "memory.limit_in_bytes").write_text(str(limit))
                with contextlib.suppress(FileNotFoundError, PermissionError):
                    (mem / "memory.memsw.limit_in_bytes").write_text(str(limit))
                (self.dirs["pids"] / "pids.max").write_text(str(pids))
                (self.dirs["cpu"] / "cpu.cfs_period_us").write_text("100000")
                (self.dirs["cpu"] / "cpu.cfs_quota_us").write_text(str(quota))
        except OSError as e:
            self.remove()
            raise CgroupError(f"cannot make the sandbox's cgroups under {ROOT} ({e})") from e

    def join(self) -> None:
        """Move the calling process in; runs in the child between fork and exec (no locks)."""
        pid = str(os.getpid()).encode()
        for d in self.dirs.values():
            fd = os.open(str(d / "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def pids(self) -> list[int]:
        d = self.dirs.get("unified") or self.dirs["pids"]
        try:
            return [int(p) for p in (d / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def oom_kills(self) -> int:
        """How many processes the sandbox's memory limit has killed (0 if unknown)."""
        d = self.dirs.get("unified") or self.dirs["memory"]
        for name in ("memory.events", "memory.oom_control"):
            with contextlib.suppress(OSError):
                for line in (d / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        return 0

    def remove(self) -> None:
        """Kill whatever is left inside, then remove the directories."""
        for _ in range(200):
            left = self.pids()
            if not left:
                break
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        for d in self.dirs.values():
            with contextlib.suppress(FileNotFoundError, OSError):
                d.rmdir()


def leftover_ids() -> set[str]:
    """Sandbox ids that still have a cgroup (for the reaper)."""
    base = ROOT / PARENT if _v2() else ROOT / "pids" / PARENT
    with contextlib.suppress(OSError):
        return {p.name for p in base.iterdir() if p.is_dir()}
    return set()
