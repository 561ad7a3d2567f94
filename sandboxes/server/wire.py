"""The channel's frames and handshake, shared by the server and the harness.

Frames, both ways: 4-byte big-endian length, then a UTF-8 JSON object. Requests carry `op`
plus arguments; responses carry `ok` and either results or `error`.

Handshake (the first two requests of every connection), so that neither end can be
impersonated by code running in the sandbox:

    harness -> {"op": "hello", "nonce": Nh}
    server  -> {"ok": true, "nonce": Ns, "proof": H(key, "server", Nh, Ns)}   harness checks
    harness -> {"op": "auth", "proof": H(key, "harness", Nh, Ns)}             server checks
    server  -> {"ok": true, "version": PROTOCOL_VERSION}

`key` is a per-sandbox secret the harness made and left in the run directory (`KEY_FILE`,
root's, 0600); the server reads and deletes it at start and then makes itself non-dumpable,
so the key lives only in the memory of a process that not even root in the sandbox may read
(no CAP_SYS_PTRACE there). It never travels on the socket, so a fake server learns nothing
it could replay. H is HMAC-SHA256.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct

PROTOCOL_VERSION = 2
KEY_FILE = "key"  # in the run directory, beside the socket
HEADER = struct.Struct(">I")
MAX_FRAME = 512 * 1024 * 1024
MAX_HELLO_FRAME = 4096  # what an unauthenticated peer may make the other end read


def write_key(run_dir: str, key: str) -> None:
    """Leave the key where the server will read it (harness side, before the server starts)."""
    fd = os.open(os.path.join(run_dir, KEY_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key)


def take_key(run_dir: str) -> str:
    """Read the key and delete it (server side, at start)."""
    path = os.path.join(run_dir, KEY_FILE)
    with open(path) as f:
        key = f.read().strip()
    os.unlink(path)
    return key


def proof(key: bytes, role: str, harness_nonce: str, server_nonce: str) -> str:
    msg = f"arborl-channel|{role}|{harness_nonce}|{server_nonce}".encode()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def check(key: bytes, role: str, harness_nonce: str, server_nonce: str, claimed: object) -> bool:
    return isinstance(claimed, str) and hmac.compare_digest(
        proof(key, role, harness_nonce, server_nonce), claimed
    )


def read_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return bytes(buf)


def read_frame(conn: socket.socket, limit: int) -> dict:
    (size,) = HEADER.unpack(read_exact(conn, HEADER.size))
    if size > limit:
        raise ValueError(f"frame of {size} bytes is over the limit of {limit}")
    return json.loads(read_exact(conn, size))


def send_frame(conn: socket.socket, obj: dict) -> None:
    data = json.dumps(obj).encode()
    conn.sendall(HEADER.pack(len(data)) + data)
