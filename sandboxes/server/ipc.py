"""IPC objects that live outside every file tree: cleared at reset.

SysV shared memory, message queues and semaphores, and POSIX message queues, belong to the
sandbox's IPC namespace, not to a file the restore could put back, so an episode could leave
one for the next. The namespace is the sandbox's own (Docker's default, bwrap's
`--unshare-ipc`), so clearing it touches no one else. SysV objects are removed as the agent
(`ipcrm --all`): only their creator or CAP_SYS_ADMIN may, and the server has no such
capability. POSIX queues are files of /dev/mqueue, which the server may unlink.
"""

from __future__ import annotations

import contextlib
import os
import subprocess

from .execute import as_agent_argv

SYSV_TABLES = ("/proc/sysvipc/shm", "/proc/sysvipc/msg", "/proc/sysvipc/sem")
MQUEUE = "/dev/mqueue"


def sysv_objects() -> int:
    """How many SysV IPC objects the namespace holds (each table has one header line)."""
    count = 0
    for table in SYSV_TABLES:
        with contextlib.suppress(OSError), open(table) as f:
            count += max(0, sum(1 for _ in f) - 1)
    return count


def clear(uid: int | None, gid: int | None, drop: str | None) -> int:
    """Remove every SysV object the agent made and every POSIX queue; returns how many."""
    removed = 0
    found = sysv_objects()
    if found:
        argv = ["ipcrm", "--all"]
        if uid is not None:
            argv = as_agent_argv(argv, uid, gid, drop) or argv
        subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        removed += found - sysv_objects()
    with contextlib.suppress(OSError):
        for name in os.listdir(MQUEUE):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(MQUEUE, name))
                removed += 1
    return removed
