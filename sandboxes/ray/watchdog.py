"""Remove a process's sandboxes as soon as that process dies, however it dies.

A Ray node's `SandboxNode` actor is ended by Ray when the driver that owns it goes away
(a crashed trainer, a verl worker that is killed rather than closed), with no chance to
close its pool: Docker containers, and a bubblewrap sandbox's directory, cgroup and uid,
would stay until the next pool started on that node. So the actor starts this watchdog: a
process of its own session, re-parented away from the actor (Ray kills an actor's child
processes with it), that waits on the actor's pid (a pidfd, so no polling and no pid reuse)
and then reaps, on that node's own backend, the sandboxes whose owner is dead. Only dead
owners' sandboxes are reaped: another live pool of the same run on the node keeps its own.

    python -m arborl.sandboxes.ray.watchdog '{"pid": ..., "start": ..., "backend": {...}}'

The backend (a Docker client, ...) is made only once there is something to reap; waiting
costs one idle process per node actor. The watchdog has no terminal, so what it did (and a
reap that failed every try) is appended to `watchdog.log` in arborl's cache directory
(`$ARBORL_CACHE`, else ~/.cache/arborl).
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..owner import is_same_process, process_start

log = logging.getLogger(__name__)


def reap_when_gone(pid: int, backend: dict[str, Any]) -> None:
    """Start the watchdog for `pid` (a process of this host) and `backend` (a make_backend
    config of the backend its sandboxes are on). Returns once the watchdog is detached."""
    arg = json.dumps({"pid": pid, "start": process_start(pid), "backend": backend})
    try:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "arborl.sandboxes.ray.watchdog", arg],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        launcher.wait(timeout=60)  # it forks the watchdog and exits at once
    except (OSError, subprocess.TimeoutExpired) as e:  # the pool still works; only this is lost
        log.warning(
            "no watchdog for pid %d (%s): if it dies unclosed, its sandboxes stay until the next "
            "pool starts on this host or `arborl sandbox gc` runs",
            pid,
            e,
        )


def _wait_for_exit(pid: int, start: str | None) -> None:
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # gone already
        return
    try:
        if not is_same_process(pid, start):  # the pid was reused before the pidfd was opened
            return
        select.select([fd], [], [])
    finally:
        os.close(fd)


def log_path() -> Path:
    return Path(os.environ.get("ARBORL_CACHE", Path.home() / ".cache" / "arborl")) / "watchdog.log"


def reap(spec: dict[str, Any], tries: int = 3) -> bool:
    """Reap the dead owners' sandboxes of `spec`'s backend, a few tries; each outcome is a line
    of `log_path()`. True if a try succeeded."""
    from ..factory import make_backend

    path = log_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s watchdog[%(process)d] %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    kind = spec["backend"].get("type", "?") if isinstance(spec["backend"], dict) else "?"
    try:
        for attempt in range(tries):  # a Docker engine busy removing the dead actor's exec sessions
            try:
                make_backend(spec["backend"]).reap()
                log.info("pid %s ended; reaped its dead owners' %s sandboxes", spec["pid"], kind)
                return True
            except Exception as e:
                log.warning("pid %s ended; reaping %s sandboxes failed (try %d of %d): %s: %s",
                            spec["pid"], kind, attempt + 1, tries, type(e).__name__, e)  # fmt: skip
                if attempt + 1 < tries:
                    time.sleep(2.0 * (attempt + 1))
        log.error(
            "gave up: the sandboxes stay until the next pool starts on this host or `arborl sandbox gc` runs"
        )
        return False
    finally:
        log.removeHandler(handler)
        handler.close()


def main(arg: str) -> None:
    spec = json.loads(arg)
    if os.fork() > 0:  # the launcher exits; the watchdog is nobody's child in the actor's tree
        os._exit(0)
    _wait_for_exit(int(spec["pid"]), spec.get("start"))
    reap(spec)


if __name__ == "__main__":
    main(sys.argv[1])
