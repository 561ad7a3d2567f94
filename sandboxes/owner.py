"""Who made a sandbox, so a reaper can tell orphans from live ones.

A sandbox is labelled with its owner's host, pid and the pid's start time (the start time
guards against a recycled pid). An owner on this host whose pid is gone, or now belongs to
another process, is dead: its sandboxes are orphans. It is labelled with its run too (one id
shared by every process of a run, on every node: `set_run_id`), so a reaper can remove a run's
sandboxes whichever process of it made them (`reapable`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

OWNER_HOST = "arborl.owner_host"
OWNER_PID = "arborl.owner_pid"
OWNER_START = "arborl.owner_start"
OWNER_RUN = "arborl.run"

_run = {"id": os.environ.get("ARBORL_RUN_ID", "")}


def set_run_id(run_id: str) -> None:
    """Label every sandbox this process makes from now on with run `run_id`."""
    _run["id"] = run_id


def run_id() -> str:
    """This process's run id ("" when none was set)."""
    return _run["id"]


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def is_same_process(pid: int, start: str | None) -> bool:
    """True while `pid` is still the process that had start time `start`: a pid read from a
    file written earlier may belong to another process by now (pids wrap, within minutes on a
    busy machine), and signalling it would hit that one."""
    return pid > 0 and bool(start) and _start_time(pid) == start


def process_start(pid: int) -> str | None:
    """`pid`'s start time (clock ticks since boot), to tell it from a later process of that pid."""
    return _start_time(pid)


def owner_labels() -> dict[str, str]:
    pid = os.getpid()
    return {
        OWNER_HOST: socket.gethostname(),
        OWNER_PID: str(pid),
        OWNER_START: _start_time(pid) or "",
        OWNER_RUN: _run["id"],
    }


def owner_alive(labels: Mapping[str, str]) -> bool:
    """True unless the owner is known dead. Owners on other hosts count as alive."""
    if labels.get(OWNER_HOST) != socket.gethostname():
        return True
    try:
        pid = int(labels.get(OWNER_PID, ""))
    except ValueError:
        return False
    start = _start_time(pid)
    return start is not None and start == labels.get(OWNER_START, start)


def reapable(labels: Mapping[str, str], all_sandboxes: bool = False, run: str | None = None) -> bool:
    """Whether a reaper should remove the sandbox: every one, its owner is dead, or it belongs
    to run `run` (a run's pool removes what any process of that run left, live owner or not)."""
    return all_sandboxes or not owner_alive(labels) or (bool(run) and labels.get(OWNER_RUN) == run)
