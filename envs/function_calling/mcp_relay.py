"""Inside the sandbox: the relay between arborl and an MCP stdio server (stdlib only).

The sandbox API runs one command at a time to completion; it has no streaming exec. So this
script, uploaded into the episode's sandbox, starts the server as a daemon holding its
stdin/stdout pipes, and the harness talks to it with short commands over a unix socket in
a directory of the episode:

    relay.py start DIR CMD...   start CMD (the server) behind the relay; prints "ready"
    cat > DIR/in                what is written to this fifo goes to the server's stdin
    relay.py recv DIR WAIT      print the server's output lines, waiting up to WAIT s for
                                one; exit 3 (stderr: the server's last words) once it exited

(Messages in go through a fifo with `cat`: a python3 start per message, its imports above
all, cost about 0.1 s more on a loaded machine.)

Everything here runs as the agent: the harness treats what comes back as untrusted input.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time

CAP = 4 << 20  # the largest message passed on; a longer line is dropped (the call then times out)
BATCH = 1 << 20  # at most this much per `recv` (one longer message goes alone)


def _read_line(stream):
    """One line of at most CAP bytes; longer ones are skipped whole (b"" at EOF)."""
    while True:
        line = stream.readline(CAP + 1)
        if len(line) <= CAP or line.endswith(b"\n"):
            return line
        while line and not line.endswith(b"\n"):
            line = stream.readline(CAP)
        sys.stderr.write(f"arborl relay: dropped a message over {CAP} bytes\n")


class Relay:
    def __init__(self, directory, cmd):
        self.dir = directory
        self.err = open(os.path.join(directory, "stderr"), "ab", buffering=0)  # noqa: SIM115 (the server's, for life)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err)
        self.lines = []
        self.exit = None
        self.cond = threading.Condition()

    def pump(self):
        while True:
            line = _read_line(self.proc.stdout)
            if not line:
                break
            if line.strip():
                with self.cond:
                    self.lines.append(line if line.endswith(b"\n") else line + b"\n")
                    self.cond.notify_all()
        code = self.proc.wait()
        with self.cond:
            self.exit = code
            self.cond.notify_all()

    def handle(self, conn):
        with conn, conn.makefile("rb") as rf:
            req = json.loads(rf.readline())
            deadline = time.monotonic() + float(req["wait"])
            with self.cond:
                while not self.lines and self.exit is None and time.monotonic() < deadline:
                    self.cond.wait(deadline - time.monotonic())
                out, size = [], 0
                while self.lines and (not out or size + len(self.lines[0]) <= BATCH):
                    size += len(self.lines[0])
                    out.append(self.lines.pop(0))
                done = self.exit if not out else None
            conn.sendall((b"OK\n" if done is None else b"EXIT %d\n" % done) + b"".join(out))

    def feed(self):
        """The fifo's bytes to the server's stdin (held open read-write: no EOF between writers)."""
        fd = os.open(os.path.join(self.dir, "in"), os.O_RDWR)
        while True:
            data = os.read(fd, 1 << 16)
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except OSError:
                return  # the server is gone: `recv` says so

    def serve(self):
        os.mkfifo(os.path.join(self.dir, "in"), 0o600)
        threading.Thread(target=self.pump, daemon=True).start()
        threading.Thread(target=self.feed, daemon=True).start()
        path = os.path.join(self.dir, "sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path + ".new")
        os.rename(path + ".new", path)  # appears only once it listens
        srv.listen(16)
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()


def start(directory, cmd):
    if os.fork():  # the caller's command returns once the relay answers
        path, log = os.path.join(directory, "sock"), os.path.join(directory, "relay.log")
        for _ in range(400):
            if os.path.exists(path):
                print("ready")
                return 0
            if os.path.exists(log) and os.path.getsize(log):
                break
            time.sleep(0.025)
        why = "no answer in 10 s"
        if os.path.exists(log):
            with open(log) as f:
                why = f.read()[-2000:] or why
        sys.stderr.write(f"the relay did not start: {why}")
        return 1
    os.setsid()
    if os.fork():
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    log = os.open(os.path.join(directory, "relay.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(log, 2)
    try:
        Relay(directory, cmd).serve()
    except BaseException as e:
        sys.stderr.write(f"arborl relay: {type(e).__name__}: {e}\n")
    os._exit(1)


def talk(directory, header):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.path.join(directory, "sock"))
    conn.sendall(json.dumps(header).encode() + b"\n")
    conn.shutdown(socket.SHUT_WR)
    chunks = []
    while True:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def main(argv):
    op, directory = argv[0], argv[1]
    if op == "start":
        return start(directory, argv[2:])
    out = talk(directory, {"op": "recv", "wait": float(argv[2])})
    status, _, out = out.partition(b"\n")
    if status.startswith(b"EXIT "):
        with open(os.path.join(directory, "stderr"), "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 2000))
            sys.stderr.write(
                "the MCP server exited with code {}: {}".format(
                    status[5:].decode(), f.read().decode("utf-8", "replace")
                )
            )
        return 3
    sys.stdout.buffer.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
