"""Snapshot and reset: kill what the episode left, put the writable trees back.

Also finds what the agent could write outside the trees the harness asked to restore, so
the backend can restore those too (or refuse to start): state that survives a reset is a
channel from one episode to the next.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import stat
import subprocess
import time

from .writes import WriteWatch

SNAPSHOT_ROOT = "/var/lib/arborl/snapshot"
_NEVER_SCANNED = ("/proc", "/sys")


def coarse_now() -> int:
    """The clock file ctimes come from (coarse, up to a tick or two behind the precise one)."""
    return time.clock_gettime_ns(getattr(time, "CLOCK_REALTIME_COARSE", 5))


def _stamp(path: str) -> int:
    """Give `path` a new ctime and return it: a bound on every ctime its filesystem wrote before.

    Coarse ctimes never go back, and on multigrain filesystems (Linux 6.13+) a coarse ctime
    is never earlier than any fine-grained one already handed out (the kernel's floor), so
    the newest stamp bounds them all. utime with the times it has changes nothing else.
    """
    st = os.lstat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
    return os.lstat(path).st_ctime_ns


_MAX_GRAIN_WAITED = 1_000_000  # ns


def _granule(ctime_ns: int) -> int:
    """A multiple of the filesystem's timestamp granularity, read off one of its ctimes.

    Linux granularities divide 1 s or are 2 s (FAT), so they divide gcd(ctime, 2 s); on a
    nanosecond filesystem this is a few ns at worst.
    """
    return math.gcd(ctime_ns, 2_000_000_000) or 1


def _marks(paths: list[str], max_wait_s: float = 0.5) -> dict[str, int]:
    """Reset marks for freshly restored trees: for each path, a time such that

    - every ctime written from now on is at least the mark, so an edit the agent makes
      counts as touched (security: this must hold even if the wait below gives up), and
    - every ctime written so far is below it, so untouched files are kept next time with
      their inodes (performance only).

    The mark is the coarse clock read at the end, rounded down to the filesystem's
    granularity (later ctimes are that clock or later, rounded the same way). Before reading
    it, wait until the clock has passed the newest stamp: a multigrain filesystem may have
    stamped the copies with a fine-grained time ahead of the coarse clock by over a tick,
    and without the wait those files would count as touched and be copied again at every
    reset, each time with a new inode (git then re-hashes them).
    """
    stamps = {}
    for p in paths:
        with contextlib.suppress(OSError):  # gone, or not ours to touch: no wait for it
            stamps[p] = _stamp(p)
    grains = {p: _granule(c) for p, c in stamps.items()}
    # A coarse filesystem (/dev/mqueue keeps whole seconds) would cost up to its granule
    # per reset; there a file restored in the last granule is copied once more instead.
    waits = {p: c for p, c in stamps.items() if grains[p] <= _MAX_GRAIN_WAITED}
    deadline = time.monotonic() + max_wait_s
    while True:
        now = coarse_now()
        marks = {p: now - now % grains.get(p, 1) for p in paths}
        if all(marks[p] > c for p, c in waits.items()) or time.monotonic() > deadline:
            return marks
        time.sleep(0.0005)


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def agent_writable(uid: int, gid: int, covered: list[str]) -> list[str]:
    """Directories and files outside `covered` that `uid`/`gid` may write (by mode bits).

    A writable directory is reported whole (its subtree is not walked); read-only mounts
    do not count.
    """

    def may_write(st: os.stat_result) -> bool:
        m = st.st_mode
        return bool(m & 0o002 or (st.st_uid == uid and m & 0o200) or (st.st_gid == gid and m & 0o020))

    found: list[str] = []
    skip = [*covered, *_NEVER_SCANNED, SNAPSHOT_ROOT]

    def read_only(path: str) -> bool:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)

    def walk(d: str, dev: int) -> None:
        try:
            entries = list(os.scandir(d))
        except OSError:
            return
        for e in entries:
            if _inside(e.path, skip):
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            is_dir, is_reg = stat.S_ISDIR(st.st_mode), stat.S_ISREG(st.st_mode)
            if is_dir and st.st_dev != dev and read_only(e.path):
                continue  # a read-only mount (the host's /usr in bwrap): nothing below is writable
            if (is_dir or is_reg) and may_write(st) and not read_only(e.path):
                found.append(e.path)
            elif is_dir:
                walk(e.path, st.st_dev)

    walk("/", os.lstat("/").st_dev)
    return sorted(found)


def snapshot(paths: list[str], own: tuple[int, int] | None) -> list[list[str]]:
    """Copy each path aside, where only root can read it; returns (path, copy) pairs."""
    os.makedirs(SNAPSHOT_ROOT, mode=0o700, exist_ok=True)
    os.chmod(os.path.dirname(SNAPSHOT_ROOT), 0o700)
    pairs = []
    for i, path in enumerate(paths):
        target = os.path.join(SNAPSHOT_ROOT, str(i))
        if os.path.lexists(target):
            _remove(target, os.lstat(target))
        if not os.path.lexists(path):
            os.makedirs(path, exist_ok=True)
            if own is not None:
                os.chown(path, *own)
        subprocess.run(["cp", "-a", "--", path, target], check=True)
        pairs.append([path, target])
    return pairs


def _live_pids(keep: set[int]) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in keep:
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):  # zombies wait for their parent's wait(), not for us
            pids.append(int(name))
    return pids


def kill_everything_else(own_pid_namespace: bool) -> int:
    """SIGKILL every process in the sandbox but PID 1 and this server; returns the count.

    In its own PID namespace the server uses kill(-1): the kernel signals every process
    but init and the caller in one pass under the tasklist lock, so a fork bomb cannot
    slip a child past it. The /proc sweep then catches anything left (and is all there
    is without a private PID namespace, where kill(-1) would reach the whole host).
    """
    keep = {1, os.getpid(), os.getppid()}
    before = len(_live_pids(keep))
    if own_pid_namespace:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
    for _ in range(500):
        pids = _live_pids(keep)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.0005)
    return before


def _remove(path: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


class Restorer:
    """Makes live trees equal to their snapshots, copying only what changed since last time.

    Kept as it is: an entry of the same kind whose ctime is older than its tree's mark (the
    end of the previous restore), that no one opened for writing since (`WriteWatch`), under
    a directory that is the same directory as at the mark (same inode: a directory moved or
    swapped in keeps its children's ctimes). Everything else is copied from the snapshot.
    """

    def __init__(self) -> None:
        self.marks: dict[str, int] = {}  # live path -> coarse time its last restore ended
        self.dir_inodes: dict[str, int] = {}  # live directory -> its inode at the last mark
        self.watch = WriteWatch()
        self._touched: set[str] | None = None  # files opened for writing; None: unknown

    def mark(self, paths: list[str]) -> None:
        self.watch.drain()
        for path in paths:
            self._watch_tree(path)
        self.watch.drain()  # what the walk itself caused, before any agent runs
        self.marks = _marks(paths)

    def _watch_tree(self, root: str) -> None:
        for d, subdirs, _ in os.walk(root):
            self._watch_dir(d)
            subdirs[:] = [s for s in subdirs if not os.path.islink(os.path.join(d, s))]

    def _watch_dir(self, path: str) -> None:
        with contextlib.suppress(OSError):
            self.dir_inodes[path] = os.lstat(path).st_ino
            self.watch.add(path)

    def restore(self, pairs: list[list[str]]) -> int:
        self._touched = self.watch.drain()
        copied = 0
        remark = []
        for path, snap in pairs:
            n = 0
            try:
                if os.path.isdir(snap) and not os.path.islink(snap):
                    n = self._sync_tree(snap, path, self.marks.get(path))
                    self._copy_meta(os.lstat(snap), path)
                else:
                    n = self._sync_file(snap, path, self.marks.get(path))
            except OSError:
                # Whatever went wrong (an odd file type, a half-deleted tree), start over.
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                subprocess.run(["cp", "-a", "--", snap, path], check=True)
                self.marks.pop(path, None)
                if os.path.isdir(path):
                    self._watch_tree(path)
                n = 1
            copied += n
            # A tree with nothing written keeps its mark: it still parts what was there from
            # what comes next, and keeping it saves the wait.
            if n or path not in self.marks:
                remark.append(path)
        self.watch.drain()  # the restore's own writes
        if remark:
            self.marks.update(_marks(remark))
        return copied

    def _unchanged(
        self,
        src: str,
        dst: str,
        want: os.stat_result,
        have: os.stat_result,
        mark: int | None,
        compare: bool = False,
    ) -> bool:
        """Whether live `dst` may be kept as the snapshot's `src` without copying it; `compare`
        checks a regular file's bytes even if no one opened it for writing."""
        if stat.S_IFMT(have.st_mode) != stat.S_IFMT(want.st_mode) or mark is None or have.st_ctime_ns >= mark:
            return False
        if not stat.S_ISREG(want.st_mode):
            return True  # links cannot change in place; ctime covers the rest
        if not compare and self._touched is not None and dst not in self._touched:
            return True
        return have.st_size == want.st_size and _same_bytes(src, dst)

    def _sync_file(self, src: str, dst: str, mark: int | None) -> int:
        want = os.lstat(src)
        try:
            have = os.lstat(dst)
        except FileNotFoundError:
            return self._copy_entry(src, dst, want)
        if self._unchanged(src, dst, want, have, mark, compare=True):
            return 0
        _remove(dst, have)
        return self._copy_entry(src, dst, want)

    def _sync_tree(self, src: str, dst: str, mark: int | None) -> int:
        """Make `dst` equal to the snapshot `src`; returns how many entries were copied.

        An entry `_unchanged` says may stay is kept as it is: restore costs O(changed files),
        and untouched files keep their inodes, so `git status` does not re-hash the tree.
        Without a mark (first reset, a new directory) every file is copied.
        """
        try:
            live = {e.name: e for e in os.scandir(dst)}
        except FileNotFoundError:
            os.mkdir(dst)
            live = {}
        ino = os.lstat(dst).st_ino
        if self.dir_inodes.get(dst) != ino:
            mark = None  # not the directory the mark saw: nothing below it can be trusted
            self._watch_dir(dst)
        copied = 0
        for entry in os.scandir(src):
            want = entry.stat(follow_symlinks=False)
            target = os.path.join(dst, entry.name)
            have_entry = live.pop(entry.name, None)
            if have_entry is not None:
                have = have_entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(want.st_mode) and stat.S_ISDIR(have.st_mode):
                    copied += self._sync_tree(entry.path, target, mark)
                    self._copy_meta(want, target)
                    continue
                if self._unchanged(entry.path, target, want, have, mark):
                    continue
                _remove(target, have)
            copied += self._copy_entry(entry.path, target, want)
        for entry in live.values():
            _remove(entry.path, entry.stat(follow_symlinks=False))
        return copied

    def _copy_entry(self, src: str, dst: str, st: os.stat_result) -> int:
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(src), dst)
            with contextlib.suppress(OSError):
                os.lchown(dst, st.st_uid, st.st_gid)
            return 1
        if stat.S_ISDIR(st.st_mode):
            os.mkdir(dst)
            n = self._sync_tree(src, dst, None)
            self._copy_meta(st, dst)
            return n + 1
        if stat.S_ISREG(st.st_mode):
            shutil.copyfile(src, dst, follow_symlinks=False)
            self._copy_meta(st, dst)
            return 1
        subprocess.run(["cp", "-a", "--", src, dst], check=True)  # fifos, sockets: rare
        return 1

    @staticmethod
    def _copy_meta(st: os.stat_result, path: str) -> None:
        os.chown(path, st.st_uid, st.st_gid, follow_symlinks=False)
        os.chmod(path, stat.S_IMODE(st.st_mode))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def _same_bytes(a: str, b: str, chunk: int = 1 << 20) -> bool:
    """Whether two regular files hold the same bytes (neither followed if a link)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fa, fb = os.open(a, flags), os.open(b, flags)
    except OSError:
        return False
    try:
        while True:
            x, y = os.read(fa, chunk), os.read(fb, chunk)
            if x != y:
                return False
            if not x:
                return True
    finally:
        os.close(fa)
        os.close(fb)
