"""Which files were opened for writing since reset last looked: inotify's IN_CLOSE_WRITE.

Reset keeps a file whose ctime is older than its mark, but a write through a shared map
(`mmap(MAP_SHARED)`, then a store) changes a file on tmpfs without moving ctime or mtime. Every
way to change a file's bytes needs a descriptor opened for writing, and the kernel reports
IN_CLOSE_WRITE when the last reference to such a descriptor goes, maps included, by the time
the writer is dead (its files are released before it becomes a zombie). So a watch on every
directory of the reset trees names every file whose content may have changed, whatever the
route, at no cost per untouched file. Content hashing would cost a read of every file at every
reset; remounting needs privileges the server does not have.

A watch reports a file opened through a directory that existed when the watch was made. A
file reached through a new directory or a new hard link has a new name or a moved ctime, which
reset already sees. When the kernel loses events (queue overflow) or a watch cannot be added
(the host's inotify limits), `drain` says "unknown" and reset compares every file's content.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct

IN_CLOSE_WRITE = 0x00000008
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then a NUL-padded name)
_MASK = IN_CLOSE_WRITE | IN_ONLYDIR | IN_DONT_FOLLOW

_libc = ctypes.CDLL(None, use_errno=True)


class WriteWatch:
    """An inotify instance watching directories for files closed after being opened to write."""

    def __init__(self) -> None:
        self.fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        self.dirs: dict[int, str] = {}  # watch descriptor -> directory path when it was added
        self.lost = self.fd < 0  # events may have been missed since the last drain

    @property
    def working(self) -> bool:
        return self.fd >= 0

    def add(self, directory: str) -> None:
        """Watch `directory` (its files, not its subdirectories)."""
        if self.fd < 0:
            return
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(directory), _MASK)
        if wd < 0:
            self.lost = True  # ENOSPC (the host's watch limit) or the directory went away
            return
        self.dirs[wd] = directory

    def drain(self) -> set[str] | None:
        """Paths of files closed after writing since the last drain; None when unknown."""
        if self.fd < 0:
            return None
        touched: set[str] = set()
        lost = self.lost
        while True:
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            pos = 0
            while pos + _EVENT.size <= len(buf):
                wd, mask, _, size = _EVENT.unpack_from(buf, pos)
                name = buf[pos + _EVENT.size : pos + _EVENT.size + size].rstrip(b"\0")
                pos += _EVENT.size + size
                if mask & IN_Q_OVERFLOW:
                    lost = True
                elif mask & IN_IGNORED:
                    self.dirs.pop(wd, None)
                elif wd in self.dirs and name:
                    touched.add(os.path.join(self.dirs[wd], os.fsdecode(name)))
        self.lost = False
        return None if lost else touched

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
