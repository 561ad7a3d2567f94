"""The reward guard: runs tests/test.sh in the sandbox and says whether the reward changed after it.

What the tests run of the agent's (its service, its program) runs as root beside them and can
go on running after test.sh: a process that keeps writing reward.txt would have the last word.
So test.sh runs under this small program (the image's own Python, isolated, stdlib only), run
by root, which

- makes itself a child subreaper, so everything test.sh starts, daemons included, stays below
  it, and makes itself undumpable, so no other process can read its memory;
- watches /logs/verifier with inotify while the tests run;
- when test.sh exits, reads what happened so far, kills every process below it (until none is
  left), and reads again: any change to reward.txt, reward.json or the directory in that second
  read was made after test.sh had ended, by something it started;
- prints its verdict as the last line, with a nonce the host sent on its stdin (which test.sh
  does not inherit), so nothing the tests ran can print a verdict of its own.

A verdict that is missing (the guard was killed, by something the tests ran) or says the
reward changed afterwards makes the attempt a 0 (`grading.py`). What it cannot see: a process
the tests started that overwrites the reward after test.sh's last write but before test.sh has
exited (microseconds; it would have to watch for test.sh's own write).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

MARK = "@@arborl-reward-guard"

GUARD = r"""
import ctypes, json, os, select, signal, struct, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE 0
libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
nonce = sys.stdin.readline().strip()
directory, names, argv = sys.argv[1], set(sys.argv[2].split(",")), sys.argv[3:]
# IN_MODIFY IN_ATTRIB IN_CLOSE_WRITE IN_MOVED_FROM IN_MOVED_TO IN_CREATE IN_DELETE IN_DELETE_SELF IN_MOVE_SELF
MASK = 0x2 | 0x4 | 0x8 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800
SELF = 0x400 | 0x800 | 0x8000  # the directory itself went away (IN_IGNORED: the watch with it)
ifd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
watching = libc.inotify_add_watch(ifd, directory.encode(), MASK) >= 0

def drain():
    global watching
    touched = False
    while True:
        try:
            buf = os.read(ifd, 1 << 16)
        except BlockingIOError:
            return touched
        i = 0
        while i < len(buf):
            _, mask, _, n = struct.unpack_from("iIII", buf, i)
            name = buf[i + 16 : i + 16 + n].split(b"\0", 1)[0].decode(errors="replace")
            i += 16 + n
            if mask & SELF:
                watching = libc.inotify_add_watch(ifd, directory.encode(), MASK) >= 0
                touched = True
            elif name in names:
                touched = True

def below_me():
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] not in ("Z", "X"):
            out.append(int(d))
    return out

def reap():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return

proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
pidfd = os.pidfd_open(proc.pid)
while True:
    ready, _, _ = select.select([ifd, pidfd], [], [])
    if ifd in ready:
        drain()
    if pidfd in ready:
        break
code = proc.wait()
drain()
blind = not watching
for _ in range(10000):
    left = below_me()
    if not left:
        break
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    reap()
reap()
changed = drain() or blind or not watching
sys.stdout.flush()
print("\n" + "MARK " + nonce + " " + json.dumps({"exit_code": code, "changed_after_exit": changed}), flush=True)
sys.exit(code if 0 <= code < 256 else 1)
""".replace("MARK", MARK)


@dataclass
class GuardVerdict:
    found: bool
    changed_after_exit: bool = False
    exit_code: int | None = None


def new_nonce() -> str:
    return secrets.token_hex(16)


def guard_argv(directory: str, names: tuple[str, ...], argv: list[str]) -> list[str]:
    return ["/usr/bin/python3", "-I", "-S", "-c", GUARD, directory, ",".join(names), *argv]


def read_verdict(stdout: str, nonce: str) -> tuple[GuardVerdict, str]:
    """The guard's verdict (from its last line, if it carries `nonce`) and the output without it."""
    head, _, last = stdout.rstrip("\n").rpartition("\n")
    prefix = f"{MARK} {nonce} "
    if not last.startswith(prefix):
        return GuardVerdict(found=False), stdout
    try:
        data = json.loads(last[len(prefix) :])
    except json.JSONDecodeError:
        return GuardVerdict(found=False), stdout
    verdict = GuardVerdict(True, bool(data.get("changed_after_exit")), data.get("exit_code"))
    return verdict, head
