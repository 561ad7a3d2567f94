"""Reset marks (sandboxes/server/restore.py) on the host's own filesystems, no sandbox.

A reset keeps an entry whose ctime is below its tree's mark. Security: everything written
after the mark must be at or above it, or an agent's edit survives into the next episode.
Performance: what the restore itself wrote must be below it, or untouched files are copied
again at every reset. Multigrain filesystems (Linux 6.13+) stamp a queried inode with a
fine-grained time that can be ahead of the coarse clock by more than a tick, which broke
the second property before.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

import pytest

from arborl.sandboxes.server import restore


@pytest.fixture
def shm_path():
    """A directory on tmpfs, where a write through a shared map moves neither ctime nor mtime
    (the sandboxes' writable trees are tmpfs; ext4 would stamp the write)."""
    from pathlib import Path

    path = tempfile.mkdtemp(dir="/dev/shm", prefix="arborl-test-")
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


def _tree(tmp_path):
    live, snap = tmp_path / "live", tmp_path / "snap"
    (live / "pkg").mkdir(parents=True)
    (live / "hello.txt").write_text("hello\n")
    (live / "pkg" / "mod.py").write_text("X = 1\n")
    subprocess.run(["cp", "-a", str(live), str(snap)], check=True)
    return str(live), str(snap)


def test_every_write_after_the_mark_is_at_or_above_it(tmp_path):
    live, _ = _tree(tmp_path)
    f = os.path.join(live, "hello.txt")
    for i in range(300):
        mark = restore._marks([live])[live]
        if i % 2:
            os.stat(f)  # a queried inode gets a fine-grained stamp on its next change
        with open(f, "a") as fh:
            fh.write("x")
        assert os.stat(f).st_ctime_ns >= mark


def test_untouched_files_keep_their_inodes_across_resets(tmp_path):
    live, snap = _tree(tmp_path)
    r = restore.Restorer()
    r.mark([live])
    hello = os.path.join(live, "hello.txt")
    for _ in range(60):
        os.stat(hello)
        with open(os.path.join(live, "pkg", "mod.py"), "w") as fh:
            fh.write("changed\n")
        os.chmod(hello, 0o600)  # touched: copied back with a new inode
        assert r.restore([[live, snap]]) == 2
        ino = os.stat(hello).st_ino
        os.stat(hello)
        assert r.restore([[live, snap]]) == 0  # nothing touched since: nothing copied
        assert os.stat(hello).st_ino == ino
        with open(os.path.join(live, "pkg", "mod.py"), "w") as fh:
            fh.write("changed\n")
        assert r.restore([[live, snap]]) == 1
        assert os.stat(hello).st_ino == ino
        with open(os.path.join(live, "pkg", "mod.py")) as fh:
            assert fh.read() == "X = 1\n"


def test_a_whole_second_filesystem_gets_whole_second_marks_without_waiting(tmp_path, monkeypatch):
    # /dev/mqueue keeps whole seconds: a mark inside the second would be above the
    # rounded-down ctime of an edit made in that same second.
    live, _ = _tree(tmp_path)
    second = restore.coarse_now() // 10**9 * 10**9
    monkeypatch.setattr(restore, "_stamp", lambda path: second)
    start = time.monotonic()
    mark = restore._marks([live])[live]
    assert mark % 10**9 == 0 and mark <= restore.coarse_now()
    assert time.monotonic() - start < 0.1


def _map_write(path: str, old: bytes, new: bytes) -> None:
    """What the agent's mmap attack does: a store through a shared map (ctime stays put)."""
    import mmap

    fd = os.open(path, os.O_RDWR)
    try:
        with mmap.mmap(fd, 0) as m:
            m[:] = m[:].replace(old, new)
    finally:
        os.close(fd)


def test_a_write_through_a_shared_map_is_restored_and_the_rest_keeps_its_inodes(shm_path):
    live, snap = _tree(shm_path)
    r = restore.Restorer()
    r.mark([live])
    mod = os.path.join(live, "pkg", "mod.py")
    hello_ino = os.stat(os.path.join(live, "hello.txt")).st_ino
    before = os.stat(mod).st_ctime_ns
    _map_write(mod, b"X = 1", b"X = 2")
    assert os.stat(mod).st_ctime_ns == before
    r.restore([[live, snap]])
    with open(mod) as fh:
        assert fh.read() == "X = 1\n"
    assert os.stat(os.path.join(live, "hello.txt")).st_ino == hello_ino


def test_without_the_write_watch_every_file_is_compared(shm_path):
    """Lost events (a full queue, the host's watch limits): reset compares every file's bytes."""
    live, snap = _tree(shm_path)
    r = restore.Restorer()
    r.mark([live])
    r.watch.close()
    mod = os.path.join(live, "pkg", "mod.py")
    _map_write(mod, b"X = 1", b"X = 2")
    hello_ino = os.stat(os.path.join(live, "hello.txt")).st_ino
    assert r.restore([[live, snap]]) == 1
    with open(mod) as fh:
        assert fh.read() == "X = 1\n"
    assert os.stat(os.path.join(live, "hello.txt")).st_ino == hello_ino


def test_swapped_directories_are_restored_in_full(tmp_path):
    """Moving a directory keeps its children's ctimes: a swap must not pass as untouched."""
    live, snap = _tree(tmp_path)
    os.mkdir(os.path.join(snap, "other"))
    with open(os.path.join(snap, "other", "mod.py"), "w") as fh:
        fh.write("Y = 2\n")
    r = restore.Restorer()
    r.restore([[live, snap]])  # first restore: copies everything, marks
    pkg, other = os.path.join(live, "pkg"), os.path.join(live, "other")
    os.rename(pkg, pkg + ".x")
    os.rename(other, pkg)
    os.rename(pkg + ".x", other)
    r.restore([[live, snap]])
    with open(os.path.join(pkg, "mod.py")) as fh, open(os.path.join(other, "mod.py")) as gh:
        assert (fh.read(), gh.read()) == ("X = 1\n", "Y = 2\n")
