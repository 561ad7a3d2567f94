"""`exec`: run one command as the agent (or as root, for the harness's own setup)."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time

from .cgroup import oom_kills

BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
    "PYTHONUNBUFFERED": "1",
    # Stale .pyc files survive same-second, same-size edits (mtime+size check), and
    # __pycache__ dirs pollute the diff an eval extracts as the patch.
    "PYTHONDONTWRITEBYTECODE": "1",
}


class Capture:
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


# CPython forks instead of vforking when Popen is given `user=`/`group=` (the id changes
# cannot run in a vfork child that shares the parent's memory), and forking the threaded
# server costs more than the command (about 2 ms in the container, 10 ms for a larger
# host process). So the vfork child execs a small program that drops to the agent's ids
# and then execs the command: the harness's static `arborl-drop` (sandboxes/drop_ids.c)
# where it was mounted, else util-linux setpriv (Essential in Debian, so in every image and
# on the host; about 2 ms slower). Both set real, effective and saved ids, clear the groups
# and the inheritable capabilities, which a bwrap sandbox's server keeps (with them a file
# with inheritable file capabilities would hand them to the agent).
SETPRIV = "/usr/bin/setpriv" if os.access("/usr/bin/setpriv", os.X_OK) else None


def as_agent_argv(argv: list[str], uid: int, gid: int | None, drop: str | None) -> list[str] | None:
    """`argv` wrapped to run as the agent, or None where only Popen(user=) can switch ids."""
    gid = gid if gid is not None else uid
    if drop is not None and uid != 0 and gid != 0:  # the helper refuses root as a target
        return [drop, str(uid), str(gid), *argv]
    if SETPRIV is not None:
        return [SETPRIV, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all", "--", *argv]
    return None


def run(req: dict, uid: int | None, gid: int | None, home: str, drop: str | None = None) -> dict:
    cmd = req["cmd"]
    argv = ["/bin/bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    as_root = req.get("user") == "root"
    wrapped = as_agent_argv(argv, uid, gid, drop) if not as_root and uid is not None else None
    # Popen switches ids itself (a fork) only where neither helper exists.
    popen_drops = not as_root and uid is not None and wrapped is None
    argv = wrapped or argv
    env = {**BASE_ENV, "HOME": "/root" if as_root else home}
    env.update(req.get("env") or {})
    limit = int(req.get("max_output", 64 * 1024))
    timeout = float(req.get("timeout_s") or 60.0)
    stdin = req.get("stdin")
    oom_before = oom_kills()
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
            user=uid if popen_drops else None,
            group=gid if popen_drops else None,
            extra_groups=[] if popen_drops else None,
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
    out, err = Capture(limit), Capture(limit)
    timed_out = _pump(proc, out, err, start + timeout)
    code = proc.wait()
    oom_after = oom_kills()
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


def _pump(proc: subprocess.Popen, out: Capture, err: Capture, deadline: float) -> bool:
    """Read both pipes until they close and the command exits, or the deadline passes.

    Returns True on timeout (the process group is then killed). A command that leaves a
    background child holding its pipes returns once the command itself has exited and
    the pipes have been quiet for a moment, instead of waiting for the child. The exit is
    seen through a pidfd in the same select, not by polling waitpid with sleeps, which
    cost about a millisecond per command.
    """
    assert proc.stdout is not None and proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    pidfd = -1
    with contextlib.suppress(OSError, AttributeError):
        pidfd = os.pidfd_open(proc.pid)
        sel.register(pidfd, selectors.EVENT_READ, None)
    open_streams, timed_out, exited_at = 2, False, None
    try:
        while open_streams or (exited_at is None and pidfd >= 0):
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                break
            if exited_at is None and pidfd < 0 and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.05:
                break
            wait = 0.02 if exited_at is not None else 0.2
            for key, _ in sel.select(timeout=min(deadline - now, wait)):
                if key.data is None:  # the pidfd: the command has exited
                    exited_at = time.monotonic()
                    sel.unregister(pidfd)
                    continue
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    key.data.feed(chunk)
                else:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
    finally:
        sel.close()
        if pidfd >= 0:
            os.close(pidfd)
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
