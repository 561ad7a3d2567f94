"""The sandbox's server: accepts the harness's connections and runs its requests.

Who may talk to it: only a peer that completes the handshake in `wire` with the key the
harness gave this server at start. Peers inside the sandbox that are not root are refused
before that (SO_PEERCRED), and the socket itself is root's (mode 0600, in a directory only
root can write), so the agent's uid can neither connect nor replace it.

Staying up: a selector thread watches every connection; a request, once readable, is run by
a worker thread, and the connection goes back to the selector afterwards. Workers are
started ahead and reused, so an agent that exhausts the pids cgroup (a fork bomb) cannot
keep the server from answering, and an idle connection holds no thread at all.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pwd
import queue
import resource
import secrets
import selectors
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from typing import Any

from . import cgroup, execute, files, ipc, restore, wire

SPARE_WORKERS = 6
PR_SET_DUMPABLE = 4
MAX_WORKERS = 64


class Workers:
    """Reusable threads. `submit` never fails: with no thread to be had, work waits its turn."""

    def __init__(self, spare: int) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._count = 0
        for _ in range(spare):
            self._start()

    def _start(self) -> None:
        with self._lock:
            if self._count >= MAX_WORKERS:
                return
            self._count += 1
        try:
            threading.Thread(target=self._run, daemon=True).start()
        except RuntimeError:  # can't start new thread: the pids cgroup is full
            with self._lock:
                self._count -= 1

    def _run(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._queue.get()
            with self._lock:
                self._idle -= 1
            try:
                job()
            except BaseException:  # a job's failure must not cost a worker
                traceback.print_exc()

    def submit(self, job: Any) -> None:
        self._queue.put(job)
        with self._lock:
            short = self._idle < self._queue.qsize()
        if short:
            self._start()


class Connection:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.harness_nonce: str | None = None
        self.server_nonce: str | None = None
        self.session: wire.Session | None = None  # from the hello on: every frame is tagged
        self.authenticated = False


class Server:
    def __init__(
        self, socket_path: str, user: str | None, limits: dict, own_pid_namespace: bool, key: bytes
    ) -> None:
        self.socket_path = socket_path
        self.own_pid_namespace = own_pid_namespace
        self.limits = limits
        self.key = key
        self.restorer = restore.Restorer()
        uid = gid = None
        self.home = os.environ.get("HOME", "/")
        if user and os.getuid() == 0:
            if user.isdigit():
                uid = gid = int(user)
                self.home = "/home/agent"
            else:
                entry = pwd.getpwnam(user)
                uid, gid, self.home = entry.pw_uid, entry.pw_gid, entry.pw_dir
        self.creds = files.Credentials(uid, gid)
        self.drop: str | None = None  # the arborl-drop helper's path, set by main()
        self._rearm: queue.SimpleQueue[Connection] = queue.SimpleQueue()

    # ---- setup ----------------------------------------------------------------------
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
        if os.getuid() == 0:
            # No supplementary groups: the agent's file operations take its uid and gid,
            # and root's groups must not come along.
            os.setgroups([])

    # ---- requests -------------------------------------------------------------------
    def op_exec(self, req: dict) -> dict:
        return execute.run(req, self.creds.uid, self.creds.gid, self.home, self.drop)

    def op_read_file(self, req: dict) -> dict:
        return files.read_file(req, self.creds)

    def op_write_file(self, req: dict) -> dict:
        return files.write_file(req, self.creds)

    def op_upload(self, req: dict) -> dict:
        return files.upload(req, self.creds)

    def op_download(self, req: dict) -> dict:
        return files.download(req, self.creds)

    def op_writable(self, req: dict) -> dict:
        """What the agent may write outside `covered` (the trees reset restores)."""
        if self.creds.uid is None or self.creds.gid is None:
            return {"ok": True, "paths": []}
        return {
            "ok": True,
            "paths": restore.agent_writable(self.creds.uid, self.creds.gid, list(req["covered"])),
        }

    def op_snapshot(self, req: dict) -> dict:
        """Copy each path aside (only root can read the copies); returns (path, copy) pairs."""
        own = (self.creds.uid, self.creds.gid) if self.creds.uid is not None else None
        pairs = restore.snapshot(list(req["paths"]), own)  # type: ignore[arg-type]
        self.restorer.mark([p for p, _ in pairs])
        return {"ok": True, "restore": pairs}

    def op_reset(self, req: dict) -> dict:
        start = time.monotonic()
        killed = restore.kill_everything_else(self.own_pid_namespace)
        ipc.clear(self.creds.uid, self.creds.gid, self.drop)
        t_kill = time.monotonic()
        copied = self.restorer.restore(req.get("restore") or [])
        return {
            "ok": True,
            "killed": killed,
            "kill_s": t_kill - start,
            "restored": copied,
            "restore_s": time.monotonic() - t_kill,
        }

    def op_ping(self, req: dict) -> dict:
        return {
            "ok": True,
            "version": wire.PROTOCOL_VERSION,
            "pid": os.getpid(),
            "processes": sum(1 for p in os.listdir("/proc") if p.isdigit()),
            "pids": cgroup.pids(),
            "oom_kills": cgroup.oom_kills(),
        }

    def dispatch(self, req: dict) -> dict:
        op = getattr(self, "op_" + str(req.get("op")), None)
        if op is None:
            return {"ok": False, "error": f"unknown op {req.get('op')!r}", "kind": "protocol"}
        try:
            return op(req)
        except FileNotFoundError as e:
            return {
                "ok": False,
                "error": f"no such file or directory: {e.filename or e}",
                "kind": "not_found",
            }
        except Exception as e:  # reported to the caller, never fatal to the server
            return {"ok": False, "error": f"{type(e).__name__}: {e}", "kind": "error"}

    # ---- the handshake --------------------------------------------------------------
    def _handshake(self, conn: Connection, req: dict) -> dict | None:
        """Answer a request of a connection that has not authenticated; None drops it."""
        if req.get("op") == "hello" and conn.harness_nonce is None and wire.valid_nonce(req.get("nonce")):
            conn.harness_nonce, conn.server_nonce = req["nonce"], secrets.token_hex(wire.NONCE_CHARS // 2)
            conn.session = wire.Session(self.key, conn.harness_nonce, conn.server_nonce, wire.TO_HARNESS)
            server_proof = wire.proof(self.key, "server", conn.harness_nonce, conn.server_nonce)
            return {"ok": True, "nonce": conn.server_nonce, "proof": server_proof}
        if (
            req.get("op") == "auth"
            and conn.harness_nonce is not None
            and conn.server_nonce is not None
            and wire.check(self.key, "harness", conn.harness_nonce, conn.server_nonce, req.get("proof"))
        ):
            conn.authenticated = True
            return {"ok": True, "version": wire.PROTOCOL_VERSION}
        return None

    # ---- serving --------------------------------------------------------------------
    def _serve_one(self, conn: Connection) -> None:
        """Read one request from a readable connection, answer it, hand the connection back.

        A request that fails its tag (wire.Forged) drops the connection unanswered.
        """
        session = conn.session  # a reply is tagged when its request was (hello's is not)
        try:
            # A peer that has not proven itself gets a few seconds per frame, not a worker forever.
            conn.sock.settimeout(None if conn.authenticated else 10.0)
            limit = wire.MAX_FRAME if conn.authenticated else wire.MAX_HELLO_FRAME
            req = wire.read_frame(conn.sock, limit, session)
            if conn.authenticated:
                resp = self.dispatch(req)
            else:
                answer = self._handshake(conn, req)
                if answer is None:
                    raise PermissionError("handshake failed")
                resp = answer
            wire.send_frame(conn.sock, resp, session)
        except (OSError, ValueError, struct.error, json.JSONDecodeError):
            with contextlib.suppress(OSError):
                conn.sock.close()
            return
        self._rearm.put(conn)
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    @staticmethod
    def _peer_allowed(sock: socket.socket) -> bool:
        """Refuse non-root peers inside the sandbox; the harness (outside) shows pid 0."""
        pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        return pid == 0 or uid == 0

    def serve(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            srv.bind(self.socket_path)  # born 0600: nobody but root may connect
        finally:
            os.umask(old)
        srv.listen(64)
        # Be the last thing the OOM killer picks.
        with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
            f.write("-1000")
        workers = Workers(SPARE_WORKERS)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        sel = selectors.DefaultSelector()
        sel.register(srv, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        while True:
            for key, _ in sel.select():
                if key.data is None:
                    try:
                        sock, _ = srv.accept()
                    except OSError:
                        continue
                    if not self._peer_allowed(sock):
                        sock.close()
                        continue
                    sel.register(sock, selectors.EVENT_READ, Connection(sock))
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                    while True:
                        try:
                            conn = self._rearm.get_nowait()
                        except queue.Empty:
                            break
                        with contextlib.suppress(ValueError, KeyError, OSError):
                            sel.register(conn.sock, selectors.EVENT_READ, conn)
                else:
                    conn = key.data
                    sel.unregister(conn.sock)
                    workers.submit(lambda c=conn: self._serve_one(c))


def main(argv: list[str]) -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--socket", required=True)
    p.add_argument(
        "--user", default=None, help="run agent commands as this user or uid (server must be root)"
    )
    p.add_argument("--limits", default="{}", help="JSON {nofile, fsize, as, nproc, core} rlimits")
    p.add_argument("--drop", default=None, help="the arborl-drop helper's path (else setpriv)")
    p.add_argument(
        "--own-pid-namespace",
        action="store_true",
        help="the sandbox has a private PID namespace: reset may use kill(-1)",
    )
    a = p.parse_args(argv)
    try:
        key = wire.take_key(os.path.dirname(a.socket))
    except OSError as e:
        sys.exit(f"arborl server: no channel key beside the socket ({e}); the harness leaves one")
    if len(key) < 32:
        sys.exit("arborl server: the channel key is too short")
    # Non-dumpable: nobody without CAP_SYS_PTRACE (which the sandbox never has) may trace this
    # process or read its memory, root commands in the sandbox included.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    server = Server(a.socket, a.user, json.loads(a.limits), a.own_pid_namespace, key.encode())
    # a file, not whatever a bind of a missing host path left there (a directory)
    server.drop = a.drop if a.drop and os.path.isfile(a.drop) and os.access(a.drop, os.X_OK) else None
    server.apply_limits()
    server.serve()


if __name__ == "__main__":
    main(sys.argv[1:])
