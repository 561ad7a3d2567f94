"""What the sandbox's own cgroup says: OOM kills and process counts (v1 or v2).

Docker shows a container its cgroups under /sys/fs/cgroup; the bubblewrap backend binds the
sandbox's cgroup directories there read-only, so both read the same files.
"""

from __future__ import annotations

_OOM_FILES = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")
_PIDS_DIRS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")


def oom_kills() -> int:
    """The cgroup's OOM-kill counter; -1 where the sandbox has none."""
    for path in _OOM_FILES:
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except OSError:
            continue
    return -1


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def pids() -> dict:
    """`current`, `max` and (cgroup v2 only) `peak` tasks of the sandbox's pids cgroup.

    Counted by the kernel, so the number holds while a fork bomb's processes die and
    respawn (a /proc scan does not: it is not atomic).
    """
    for d in _PIDS_DIRS:
        current = _read(f"{d}/pids.current")
        if current is None:
            continue
        limit = _read(f"{d}/pids.max")
        peak = _read(f"{d}/pids.peak")
        return {
            "current": int(current),
            "max": None if limit in (None, "max") else int(limit),
            "peak": int(peak) if peak is not None else None,
        }
    return {"current": None, "max": None, "peak": None}
