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
import subprocess
import time

from arborl.sandboxes.server import restore


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
