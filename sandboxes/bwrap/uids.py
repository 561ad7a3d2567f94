"""Host uids for the bubblewrap backend's agents: one per live sandbox.

Kernel state keyed by uid alone (a user's keyring, its process count, signals between its
processes) must not join two sandboxes. Each sandbox takes the lowest free uid of the range
by creating a file named after it with O_EXCL in a directory every harness on this host
shares, so concurrent harnesses never take the same one; destroying or reaping the sandbox
frees it. The file names the sandbox and the process that took it: a reaper (any pool's start,
a node's watchdog, `arborl sandbox gc`) frees a uid whose sandbox is gone only once that
process is dead too, since a live one may be between taking the uid and writing its sandbox's
metadata, and two sandboxes must never share a uid.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import SandboxUnavailable
from ..owner import is_same_process, process_start


class UidAllocator:
    def __init__(self, directory: Path, first: int, count: int) -> None:
        self.directory, self.first, self.count = directory, first, count
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def take(self, sandbox_id: str) -> int:
        for uid in range(self.first, self.first + self.count):
            try:
                fd = os.open(self.directory / str(uid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as f:
                f.write(f"{sandbox_id} {os.getpid()} {process_start(os.getpid()) or ''}")
            return uid
        raise SandboxUnavailable(
            f"all {self.count} agent uids from {self.first} are taken by live local sandboxes: "
            "close some, run `arborl sandbox gc`, or raise agent_uid_count"
        )

    def release(self, uid: int, sandbox_id: str | None = None) -> None:
        """Free `uid`; given `sandbox_id`, only while that sandbox still holds it (a reaper
        may have freed it already, and another sandbox taken it since)."""
        path = self.directory / str(uid)
        with contextlib.suppress(FileNotFoundError):
            if sandbox_id is None or path.read_text().split(" ")[0] == sandbox_id:
                os.unlink(path)

    def release_all_but(self, live_ids: Iterable[str]) -> None:
        """Free the uids of sandboxes that no longer exist and whose taker is dead (a harness
        that was killed)."""
        live = set(live_ids)
        for path in self.directory.iterdir():
            with contextlib.suppress(OSError, ValueError):
                sandbox_id, _, taker = path.read_text().partition(" ")
                pid, _, start = taker.partition(" ")
                if sandbox_id not in live and not (pid and is_same_process(int(pid), start)):
                    path.unlink()
