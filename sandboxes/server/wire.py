"""The channel's frames and handshake, shared by the server and the harness.

Frames, both ways: 4-byte big-endian length, then a UTF-8 JSON object, then (every frame
after the hello pair) a 32-byte tag. Requests carry `op` plus arguments; responses carry
`ok` and either results or `error`.

Handshake (the first two requests of every connection), so that neither end can be
impersonated by code running in the sandbox:

    harness -> {"op": "hello", "nonce": Nh}                                      plain
    server  -> {"ok": true, "nonce": Ns, "proof": H(key, "server", Nh, Ns)}   plain; harness checks
    harness -> {"op": "auth", "proof": H(key, "harness", Nh, Ns)}            tagged; server checks
    server  -> {"ok": true, "version": PROTOCOL_VERSION}                      tagged

`key` is a per-sandbox secret the harness made and left in the run directory (`KEY_FILE`,
root's, 0600); the server reads and deletes it at start and then makes itself non-dumpable,
so the key lives only in the memory of a process that not even root in the sandbox may read
(no CAP_SYS_PTRACE there). It never travels on the socket, so a fake server learns nothing
it could replay. H is HMAC-SHA256.

Binding to the connection: the proofs alone would let a root process in the sandbox that
relays hello and auth to the real socket forge every later reply. So both ends derive a
session key from `key` and the two fresh nonces (`Session`), and every frame after hello
carries a MAC over its direction, its sequence number in that direction and its bytes. A
relay without the key can pass frames on unchanged and in order, or cut the connection,
and nothing else: an altered, skipped, reordered, replayed, reflected or injected frame
fails its tag, and the receiver treats the connection as forged (`Forged`). Frames are not
encrypted: root in the sandbox can read what they carry where it lands anyway.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
from typing import TypeGuard

PROTOCOL_VERSION = 3
KEY_FILE = "key"  # in the run directory, beside the socket
HEADER = struct.Struct(">I")
SEQ = struct.Struct(">Q")
TAG_SIZE = 32
NONCE_CHARS = 32  # secrets.token_hex(16)
MAX_FRAME = 512 * 1024 * 1024
MAX_HELLO_FRAME = 4096  # what an unauthenticated peer may make the other end read
SMALL_FRAME = 64 * 1024  # below this a frame goes out as one joined buffer (one syscall)
CHUNK = 1 << 20
TO_SERVER = b"harness->server"
TO_HARNESS = b"server->harness"
_HEX = frozenset("0123456789abcdef")


class Forged(ValueError):
    """A frame failed its tag: it was altered, replayed, reordered, reflected or made up."""


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


def valid_nonce(nonce: object) -> TypeGuard[str]:
    """Fixed-length lowercase hex, so that no two (Nh, Ns) pairs give one HMAC message."""
    return isinstance(nonce, str) and len(nonce) == NONCE_CHARS and set(nonce) <= _HEX


def proof(key: bytes, role: str, harness_nonce: str, server_nonce: str) -> str:
    msg = f"arborl-channel-v{PROTOCOL_VERSION}|{role}|{harness_nonce}|{server_nonce}".encode()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def check(key: bytes, role: str, harness_nonce: str, server_nonce: str, claimed: object) -> bool:
    return isinstance(claimed, str) and hmac.compare_digest(
        proof(key, role, harness_nonce, server_nonce), claimed
    )


class Session:
    """The MACs of one connection after hello: a key of its own, a counter per direction.

    The session key is HMAC-SHA256(key, label | Nh | Ns): both ends' fresh nonces make it
    new for every connection, so no frame of one connection verifies on another. A frame's
    tag is keyed BLAKE2b (a MAC in its own right, RFC 7693) with the direction as its
    personalisation, over the frame's sequence number, length and bytes; BLAKE2b rather than
    HMAC-SHA256 because it is 1.7 times as fast on CPUs without SHA instructions and frames
    run to hundreds of megabytes. One `Session` serves one connection, one frame at a time.
    """

    def __init__(self, key: bytes, harness_nonce: str, server_nonce: str, sends: bytes) -> None:
        label = f"arborl-session-v{PROTOCOL_VERSION}|{harness_nonce}|{server_nonce}".encode()
        self._key = hmac.new(key, label, hashlib.sha256).digest()
        self._sends, self._receives = sends, TO_HARNESS if sends == TO_SERVER else TO_SERVER
        self._sent = self._received = 0

    def _mac(self, direction: bytes, seq: int, size: int) -> hashlib.blake2b:
        mac = hashlib.blake2b(key=self._key, digest_size=TAG_SIZE, person=direction)
        mac.update(SEQ.pack(seq) + HEADER.pack(size))
        return mac

    def sealer(self, size: int) -> hashlib.blake2b:
        """The running MAC of the next frame this end sends (`size` bytes); its digest is the tag."""
        self._sent += 1
        return self._mac(self._sends, self._sent - 1, size)

    def opener(self, size: int) -> hashlib.blake2b:
        """The running MAC of the next frame this end receives; `verify` it against the tag."""
        self._received += 1
        return self._mac(self._receives, self._received - 1, size)

    def verify(self, mac: hashlib.blake2b, tag: bytes) -> None:
        if not hmac.compare_digest(mac.digest(), tag):
            raise Forged(f"frame {self._received - 1} of {self._receives.decode()} failed its tag")

    def seal(self, body: bytes | bytearray) -> bytes:
        mac = self.sealer(len(body))
        mac.update(body)
        return mac.digest()

    def open(self, body: bytes | bytearray, tag: bytes) -> None:
        """Raises Forged unless `tag` is the next expected frame's from the other end."""
        mac = self.opener(len(body))
        mac.update(body)
        self.verify(mac, tag)


def frame_pieces(body: bytes, session: Session | None) -> list[bytes]:
    """A frame's pieces (header, body, tag), sealed when the connection has a session."""
    tag = session.seal(body) if session is not None else b""
    if len(body) < SMALL_FRAME:
        return [HEADER.pack(len(body)) + body + tag]
    return [HEADER.pack(len(body)), body, tag]  # no copy of a large body


def read_exact(conn: socket.socket, n: int, mac: hashlib.blake2b | None = None) -> bytearray:
    """`n` bytes, fed to `mac` as they come (the MAC of a large frame keeps pace with it)."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        count = conn.recv_into(view[got:], min(n - got, CHUNK))
        if not count:
            raise ConnectionError("peer closed")
        if mac is not None:
            mac.update(view[got : got + count])
        got += count
    view.release()
    return buf


def read_frame(conn: socket.socket, limit: int, session: Session | None = None) -> dict:
    (size,) = HEADER.unpack(read_exact(conn, HEADER.size))
    if size > limit:
        raise ValueError(f"frame of {size} bytes is over the limit of {limit}")
    if session is None:
        return json.loads(read_exact(conn, size))
    if size < SMALL_FRAME:  # one read for body and tag
        buf = read_exact(conn, size + TAG_SIZE)
        session.open(buf[:size], bytes(buf[size:]))
        return json.loads(buf[:size])
    mac = session.opener(size)
    body = read_exact(conn, size, mac)
    session.verify(mac, bytes(read_exact(conn, TAG_SIZE)))
    return json.loads(body)


def send_frame(conn: socket.socket, obj: dict, session: Session | None = None) -> None:
    body = json.dumps(obj).encode()
    if session is None or len(body) < SMALL_FRAME:
        for piece in frame_pieces(body, session):
            conn.sendall(piece)
        return
    mac = session.sealer(len(body))  # MAC each chunk as it goes: the peer reads meanwhile
    conn.sendall(HEADER.pack(len(body)))
    view = memoryview(body)
    for start in range(0, len(body), CHUNK):
        mac.update(view[start : start + CHUNK])
        conn.sendall(view[start : start + CHUNK])
    conn.sendall(mac.digest())
