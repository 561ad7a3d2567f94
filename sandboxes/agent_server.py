"""The process that lives inside every sandbox and runs commands for the harness.

Runs on the sandbox's own Python (stdlib only: the container image and the bwrap view of
the host carry nothing else). It listens on a unix socket in a directory bind-mounted from
the host, so each command costs one round trip on a long-lived connection instead of a
`docker exec` (FACTS.md: ~76 ms per exec vs well under 1 ms per request here).

Wire format, both ways: 4-byte big-endian length, then a UTF-8 JSON object.
Requests carry `op` plus arguments; responses carry `ok` and either results or `error`.
One thread per connection; the host opens several connections for concurrent commands.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import pwd
import resource
import selectors
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tarfile
import threading
import time

PROTOCOL_VERSION = 1
MAX_FRAME = 512 * 1024 * 1024
SNAPSHOT_ROOT = os.environ.get("ARBORL_SNAPSHOT_ROOT", "/var/lib/arborl/snapshot")
_OOM_FILES = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")


def _read_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return bytes(buf)


def _send(conn: socket.socket, obj: dict) -> None:
    data = json.dumps(obj).encode()
    conn.sendall(struct.pack(">I", len(data)) + data)


def _oom_kills() -> int:
    """The cgroup's OOM-kill counter (v1 or v2); -1 where the sandbox has none."""
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


def _coarse_now() -> int:
    """The clock file ctimes come from (coarse, up to a tick behind the precise one)."""
    return time.clock_gettime_ns(getattr(time, "CLOCK_REALTIME_COARSE", 5))


def _remove(path: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _extract_safely(tar: tarfile.TarFile, dest: str) -> None:
    """Extract refusing absolute paths, `..` escapes, outside links and device nodes.

    Uses tarfile's "data" filter where this Python has it (3.11.4+); Debian bookworm's
    3.11.2 does not, so the same rules are checked here first.
    """
    root = os.path.realpath(dest)
    for m in tar.getmembers():
        target = os.path.realpath(os.path.join(root, m.name))
        if os.path.isabs(m.name) or not (target == root or target.startswith(root + os.sep)):
            raise ValueError(f"refusing archive member outside {dest}: {m.name!r}")
        if m.issym() or m.islnk():
            base = os.path.dirname(target) if m.issym() else root
            link = os.path.realpath(os.path.join(base, m.linkname))
            if os.path.isabs(m.linkname) or not link.startswith(root + os.sep):
                raise ValueError(f"refusing link out of {dest}: {m.name!r} -> {m.linkname!r}")
        if m.isdev():
            raise ValueError(f"refusing device node {m.name!r}")
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
    else:
        tar.extractall(dest)


class _Capture:
    """Keeps the head and the tail of a stream, counting what falls in between.

    A command that prints 100 MB still costs the sandbox only `limit` bytes of memory;
    the tail is kept because test runners and tracebacks put what matters last.
    """

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_limit > 0:
            self.tail += data
            if len(self.tail) > 2 * self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    @property
    def truncated(self) -> bool:
        return self.total > self.head_limit + self.tail_limit

    def text(self) -> str:
        if not self.truncated:
            return (self.head + self.tail).decode("utf-8", "replace")
        tail = self.tail[len(self.tail) - self.tail_limit :] if self.tail_limit else b""
        dropped = self.total - len(self.head) - len(tail)
        marker = f"\n[... {dropped} bytes truncated ...]\n".encode()
        return (bytes(self.head) + marker + bytes(tail)).decode("utf-8", "replace")


class Server:
    def __init__(self, socket_path: str, user: str | None, limits: dict, own_pid_namespace: bool) -> None:
        self.socket_path = socket_path
        self.own_pid_namespace = own_pid_namespace
        self.marks: dict[str, int] = {}  # live path -> coarse time its last restore ended
        self.limits = limits
        self.user = user
        self.uid: int | None = None
        self.gid: int | None = None
        self.home = os.environ.get("HOME", "/")
        if user and os.getuid() == 0:
            entry = pwd.getpwnam(user)
            self.uid, self.gid, self.home = entry.pw_uid, entry.pw_gid, entry.pw_dir

    # ---- commands -------------------------------------------------------------------
    def apply_limits(self) -> None:
        """Set the rlimits on the server itself, so every command inherits them.

        Cheaper than a per-spawn preexec_fn (which forces a slow fork of this threaded
        process: +1.5 ms per command, measured). Thread stacks are kept small so an
        address-space limit leaves room for the server's own threads.
        """
        threading.stack_size(512 * 1024)
        for name, value in self.limits.items():
            if value:
                res = getattr(resource, f"RLIMIT_{name.upper()}")
                resource.setrlimit(res, (value, value))

    def op_exec(self, req: dict) -> dict:
        cmd = req["cmd"]
        argv = ["/bin/bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        as_root = req.get("user") == "root"
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
            "HOME": "/root" if as_root else self.home,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "PYTHONUNBUFFERED": "1",
            # Stale .pyc files survive same-second, same-size edits (mtime+size check), and
            # __pycache__ dirs pollute the diff an eval extracts as the patch.
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        env.update(req.get("env") or {})
        limit = int(req.get("max_output", 64 * 1024))
        timeout = float(req.get("timeout_s") or 60.0)
        stdin = req.get("stdin")
        oom_before = _oom_kills()
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=req.get("workdir") or None,
                env=env,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                user=None if as_root else self.uid,
                group=None if as_root else self.gid,
                extra_groups=None if as_root or self.uid is None else [],
            )
        except OSError as e:  # no such workdir, cannot fork (pids limit), ...
            return {
                "ok": True,
                "exit_code": 126,
                "stdout": "",
                "stderr": f"arborl: cannot start command: {e}",
                "timed_out": False,
                "truncated": False,
                "oom_killed": False,
                "duration_s": time.monotonic() - start,
                "stdout_bytes": 0,
                "stderr_bytes": 0,
            }
        if stdin is not None and proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(stdin.encode())
            proc.stdin.close()
        out, err = _Capture(limit), _Capture(limit)
        timed_out = self._pump(proc, out, err, start + timeout)
        code = proc.wait()
        oom_after = _oom_kills()
        oom = oom_before >= 0 and oom_after > oom_before and code < 0
        return {
            "ok": True,
            "exit_code": code if code >= 0 else 128 - code,
            "signal": -code if code < 0 else None,
            "stdout": out.text(),
            "stderr": err.text(),
            "stdout_bytes": out.total,
            "stderr_bytes": err.total,
            "timed_out": timed_out,
            "truncated": out.truncated or err.truncated,
            "oom_killed": oom,
            "duration_s": time.monotonic() - start,
        }

    @staticmethod
    def _pump(proc: subprocess.Popen, out: _Capture, err: _Capture, deadline: float) -> bool:
        """Read both pipes until they close, the command exits, or the deadline passes.

        Returns True on timeout (the process group is then killed). A command that leaves a
        background child holding its pipes returns once the command itself has exited and
        the pipes have been quiet for a moment, instead of waiting for the child.
        """
        assert proc.stdout is not None and proc.stderr is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        open_streams, timed_out, exited_at = 2, False, None
        while open_streams:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.05:
                break
            events = sel.select(timeout=min(deadline - now, 0.02 if exited_at else 0.2))
            for key, _ in events:
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    key.data.feed(chunk)
                else:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
        if not timed_out:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return timed_out

    # ---- files ----------------------------------------------------------------------
    def _chown(self, path: str) -> None:
        if self.uid is not None and self.gid is not None:
            os.chown(path, self.uid, self.gid)

    def op_read_file(self, req: dict) -> dict:
        path = req["path"]
        max_bytes = int(req.get("max_bytes", 64 * 1024 * 1024))
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            return {"ok": False, "error": f"{path} is larger than {max_bytes} bytes", "kind": "too_large"}
        return {"ok": True, "data": base64.b64encode(data).decode()}

    def op_write_file(self, req: dict) -> dict:
        path = req["path"]
        parent = os.path.dirname(path)
        if parent and not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
            self._chown(parent)
        with open(path, "wb") as f:
            f.write(base64.b64decode(req["data"]))
        if "mode" in req:
            os.chmod(path, int(req["mode"]))
        if req.get("user") != "root":
            self._chown(path)
        return {"ok": True}

    def op_upload(self, req: dict) -> dict:
        dest = req["dest"]
        os.makedirs(dest, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(req["tar"]))) as tar:
            names = tar.getnames()
            _extract_safely(tar, dest)
        if req.get("user") != "root" and self.uid is not None and self.gid is not None:
            for name in [".", *names]:
                with contextlib.suppress(OSError):
                    os.lchown(os.path.join(dest, name), self.uid, self.gid)
        return {"ok": True, "files": len(names)}

    def op_download(self, req: dict) -> dict:
        path = req["path"]
        if not os.path.exists(path):
            raise FileNotFoundError(path)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(path, arcname=os.path.basename(path.rstrip("/")) or ".")
        return {"ok": True, "tar": base64.b64encode(buf.getvalue()).decode()}

    # ---- snapshot and reset ---------------------------------------------------------
    def op_snapshot(self, req: dict) -> dict:
        """Copy each path aside (only root can read the copies); returns (path, copy) pairs."""
        os.makedirs(SNAPSHOT_ROOT, mode=0o700, exist_ok=True)
        pairs = []
        for i, path in enumerate(req["paths"]):
            target = os.path.join(SNAPSHOT_ROOT, str(i))
            if os.path.lexists(target):
                shutil.rmtree(target)
            if not os.path.isdir(path):
                os.makedirs(path, exist_ok=True)
                self._chown(path)
            subprocess.run(["cp", "-a", "--", path, target], check=True)
            pairs.append([path, target])
        mark = _coarse_now()
        self.marks = {path: mark for path, _ in pairs}
        return {"ok": True, "restore": pairs}

    @staticmethod
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

    def _kill_everything_else(self) -> int:
        """SIGKILL every process in the sandbox but PID 1 and this server; returns the count.

        In its own PID namespace the server uses kill(-1): the kernel signals every process
        but init and the caller in one pass under the tasklist lock, so a fork bomb cannot
        slip a child past it. The /proc sweep then catches anything left (and is all there
        is without a private PID namespace, where kill(-1) would reach the whole host).
        """
        keep = {1, os.getpid(), os.getppid()}
        before = len(self._live_pids(keep))
        if self.own_pid_namespace:
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGKILL)
        for _ in range(500):
            pids = self._live_pids(keep)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.0005)
        return before

    def op_reset(self, req: dict) -> dict:
        start = time.monotonic()
        killed = self._kill_everything_else()
        t_kill = time.monotonic()
        copied = 0
        for path, snap in req.get("restore") or []:
            try:
                copied += self._sync_tree(snap, path, self.marks.get(path))
            except OSError:
                # Whatever went wrong (an odd file type, a half-deleted tree), start over.
                shutil.rmtree(path, ignore_errors=True)
                subprocess.run(["cp", "-a", "--", snap, path], check=True)
                self.marks.pop(path, None)
        mark = _coarse_now()
        for path, _ in req.get("restore") or []:
            self.marks[path] = mark
        return {
            "ok": True,
            "killed": killed,
            "kill_s": t_kill - start,
            "restored": copied,
            "restore_s": time.monotonic() - t_kill,
        }

    def _sync_tree(self, src: str, dst: str, mark: int | None) -> int:
        """Make `dst` equal to the snapshot `src`; returns how many entries were copied.

        An entry whose ctime is older than `mark` (the end of the previous restore) was not
        touched since, and is kept as it is: restore costs O(changed files), and untouched
        files keep their inodes, so `git status` does not re-hash the tree. ctime cannot be
        set by users; renames, links, chmod and writes all advance it. Without a mark
        (first reset) every file is copied.
        """
        try:
            live = {e.name: e for e in os.scandir(dst)}
        except FileNotFoundError:
            os.mkdir(dst)
            live = {}
        copied = 0
        for entry in os.scandir(src):
            want = entry.stat(follow_symlinks=False)
            target = os.path.join(dst, entry.name)
            have_entry = live.pop(entry.name, None)
            if have_entry is not None:
                have = have_entry.stat(follow_symlinks=False)
                same_kind = stat.S_IFMT(have.st_mode) == stat.S_IFMT(want.st_mode)
                if same_kind and stat.S_ISDIR(want.st_mode):
                    copied += self._sync_tree(entry.path, target, mark)
                    self._copy_meta(want, target)
                    continue
                if same_kind and mark is not None and have.st_ctime_ns < mark:
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
            shutil.copyfile(src, dst)
            self._copy_meta(st, dst)
            return 1
        subprocess.run(["cp", "-a", "--", src, dst], check=True)  # fifos, sockets: rare
        return 1

    @staticmethod
    def _copy_meta(st: os.stat_result, path: str) -> None:
        with contextlib.suppress(PermissionError):  # the local backend cannot chown (one uid)
            os.chown(path, st.st_uid, st.st_gid)
        os.chmod(path, stat.S_IMODE(st.st_mode))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    def op_ping(self, req: dict) -> dict:
        procs = sum(1 for p in os.listdir("/proc") if p.isdigit())
        return {
            "ok": True,
            "version": PROTOCOL_VERSION,
            "pid": os.getpid(),
            "processes": procs,
            "oom_kills": _oom_kills(),
        }

    # ---- serving --------------------------------------------------------------------
    def handle(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    (size,) = struct.unpack(">I", _read_exact(conn, 4))
                    if size > MAX_FRAME:
                        _send(conn, {"ok": False, "error": f"request of {size} bytes is over the limit"})
                        return
                    req = json.loads(_read_exact(conn, size))
                except (ConnectionError, OSError):
                    return
                op = getattr(self, "op_" + str(req.get("op")), None)
                if op is None:
                    resp = {"ok": False, "error": f"unknown op {req.get('op')!r}", "kind": "protocol"}
                else:
                    try:
                        resp = op(req)
                    except FileNotFoundError as e:
                        resp = {
                            "ok": False,
                            "error": f"no such file or directory: {e.filename or e}",
                            "kind": "not_found",
                        }
                    except Exception as e:  # reported to the caller, never fatal to the server
                        resp = {"ok": False, "error": f"{type(e).__name__}: {e}", "kind": "error"}
                try:
                    _send(conn, resp)
                except OSError:
                    return

    def serve(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(self.socket_path)
        os.chmod(self.socket_path, 0o666)
        srv.listen(64)
        # Be the last thing the OOM killer picks.
        with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
            f.write("-1000")
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()


def main(argv: list[str]) -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--socket", required=True)
    p.add_argument("--user", default=None, help="run commands as this user (server must be root)")
    p.add_argument("--limits", default="{}", help="JSON {nofile, fsize, as, nproc, core} rlimits")
    p.add_argument(
        "--own-pid-namespace",
        action="store_true",
        help="the sandbox has a private PID namespace: reset may use kill(-1)",
    )
    a = p.parse_args(argv)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    server = Server(a.socket, a.user, json.loads(a.limits), a.own_pid_namespace)
    server.apply_limits()
    server.serve()


if __name__ == "__main__":
    main(sys.argv[1:])
