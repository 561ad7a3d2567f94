"""Host uids for the bubblewrap backend's agents: one per live sandbox.

Kernel state keyed by uid alone (a user's keyring, its process count, signals between its
processes) must not join two sandboxes. Each sandbox takes the lowest free uid of the range
by creating a file named after it with O_EXCL in a directory every harness on this host
shares, so concurrent harnesses never take the same one; destroying or reaping the sandbox
frees it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

from .errors import SandboxUnavailable


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
                f.write(sandbox_id)
            return uid
        raise SandboxUnavailable(
            f"all {self.count} agent uids from {self.first} are taken by live local sandboxes: "
            "close some, run `arborl sandbox gc`, or raise agent_uid_count"
        )

    def release(self, uid: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.directory / str(uid))

    def release_all_but(self, live_ids: Iterable[str]) -> None:
        """Free the uids of sandboxes that no longer exist (after a harness was killed)."""
        live = set(live_ids)
        for path in self.directory.iterdir():
            with contextlib.suppress(OSError):
                if path.read_text() not in live:
                    path.unlink()
