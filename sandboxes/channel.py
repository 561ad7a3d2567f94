"""Host side of the long-lived channel to a sandbox's server (unix socket).

Connections are kept open and reused; a request that finds none idle opens another, so
concurrent commands in one sandbox do not queue behind each other. Connections belong to
the event loop that opened them (asyncio streams cannot move between loops), so idle
connections are kept per loop.

Every new connection first proves, both ways, that the two ends share the sandbox's key
(`server.wire`): the harness never sends a request to, nor reads more than a few bytes
from, anything but the server it started, whatever now sits at the socket's path. Every
frame after the hello then carries a MAC under a key of that connection alone, so a root
process in the sandbox that relays the connection can pass frames on and do nothing else:
a frame that fails its tag raises ChannelForged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import stat
import time
import weakref
from dataclasses import dataclass
from typing import Any

from .server import wire


class ChannelClosed(ConnectionError):
    """The server end went away (the sandbox died or the server crashed)."""


class ChannelForged(ChannelClosed):
    """What answers at the socket is not the sandbox's server (it failed the handshake, or a
    frame failed its tag on the way)."""


class ChannelTimeout(TimeoutError):
    """The server did not answer within the deadline."""


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    session: wire.Session | None = None  # set once the hello is answered


async def _read_frame(conn: _Conn, limit: int) -> dict[str, Any]:
    (size,) = wire.HEADER.unpack(await conn.reader.readexactly(wire.HEADER.size))
    if size > limit:
        raise ChannelForged(f"a frame of {size} bytes where at most {limit} may come")
    if conn.session is None:
        return json.loads(await conn.reader.readexactly(size))
    try:
        return json.loads(await _read_sealed(conn.reader, conn.session, size))
    except wire.Forged as e:
        raise ChannelForged(f"{e}: something between the harness and the server changed it") from e


async def _read_sealed(reader: asyncio.StreamReader, session: wire.Session, size: int) -> bytes:
    """A tagged body; raises wire.Forged if it is not the next frame the server sent."""
    if size < wire.SMALL_FRAME:  # one read for body and tag
        data = await reader.readexactly(size + wire.TAG_SIZE)
        body, tag = data[:size], data[size:]
        session.open(body, tag)
        return body
    body, tag = await reader.readexactly(size), await reader.readexactly(wire.TAG_SIZE)
    # in a thread (hashlib lets go of the GIL), so that other sandboxes' requests go on
    await asyncio.to_thread(session.open, body, tag)
    return body


async def _send_frame(conn: _Conn, obj: dict[str, Any]) -> None:
    body = json.dumps(obj).encode()
    if conn.session is None or len(body) < wire.SMALL_FRAME:
        for piece in wire.frame_pieces(body, conn.session):
            conn.writer.write(piece)
    else:  # the body goes out while a thread MACs it; the tag follows
        conn.writer.write(wire.HEADER.pack(len(body)))
        conn.writer.write(body)
        conn.writer.write(await asyncio.to_thread(conn.session.seal, body))
    await conn.writer.drain()


class Channel:
    def __init__(self, socket_path: str, key: str) -> None:
        self.socket_path = socket_path
        self._key = key.encode()
        self._idle: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Conn]] = (
            weakref.WeakKeyDictionary()
        )
        self._closed = False

    async def wait_ready(self, timeout: float) -> dict[str, Any]:
        """Poll until the server answers a ping; raises ChannelTimeout after `timeout` s."""
        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            if os.path.lexists(self.socket_path):
                try:
                    return await self.request({"op": "ping"}, timeout=max(0.1, deadline - time.monotonic()))
                except ChannelForged:
                    raise
                except (ChannelClosed, OSError):
                    pass
            if time.monotonic() >= deadline:
                raise ChannelTimeout(f"no answer on {self.socket_path} after {timeout:.1f}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def _open(self) -> _Conn:
        try:
            st = os.lstat(self.socket_path)
        except FileNotFoundError as e:
            raise ChannelClosed(f"cannot connect to {self.socket_path}: it is gone") from e
        if not stat.S_ISSOCK(st.st_mode):
            raise ChannelForged(f"{self.socket_path} is no longer a socket (a link or file was put there)")
        try:
            reader, writer = await asyncio.open_unix_connection(self.socket_path, limit=2**20)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise ChannelClosed(f"cannot connect to {self.socket_path}: {e}") from e
        conn = _Conn(reader, writer)
        try:
            await self._handshake(conn)
        except ChannelForged:
            writer.close()
            raise
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ValueError) as e:
            writer.close()
            raise ChannelClosed(f"handshake with {self.socket_path} broke off ({type(e).__name__})") from e
        return conn

    async def _handshake(self, conn: _Conn) -> None:
        """hello and auth (`wire`); every frame after the hello's answer is tagged."""
        ours = secrets.token_hex(wire.NONCE_CHARS // 2)
        await _send_frame(conn, {"op": "hello", "nonce": ours})
        hello = await _read_frame(conn, wire.MAX_HELLO_FRAME)
        theirs = hello.get("nonce")
        if not wire.valid_nonce(theirs) or not wire.check(
            self._key, "server", ours, theirs, hello.get("proof")
        ):
            raise ChannelForged(f"the server at {self.socket_path} failed the handshake")
        conn.session = wire.Session(self._key, ours, theirs, wire.TO_SERVER)
        await _send_frame(conn, {"op": "auth", "proof": wire.proof(self._key, "harness", ours, theirs)})
        if not (await _read_frame(conn, wire.MAX_HELLO_FRAME)).get("ok"):
            raise ChannelForged(f"the server at {self.socket_path} refused the handshake")

    async def _connection(self) -> _Conn:
        idle = self._idle.setdefault(asyncio.get_running_loop(), [])
        while idle:
            conn = idle.pop()
            if not conn.writer.is_closing() and not conn.reader.at_eof():
                return conn
        return await self._open()

    async def request(self, payload: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Send one request and wait for its response (at most `timeout` seconds)."""
        if self._closed:
            raise ChannelClosed("channel is closed")
        try:
            async with asyncio.timeout(timeout):
                conn = await self._connection()
        except TimeoutError as e:
            raise ChannelTimeout(f"{payload.get('op')}: no connection within {timeout}s") from e
        try:
            await _send_frame(conn, payload)
            async with asyncio.timeout(timeout):
                body = await _read_frame(conn, wire.MAX_FRAME)
        except TimeoutError as e:
            conn.writer.close()  # the late answer would land on the next request: drop the connection
            raise ChannelTimeout(f"{payload.get('op')} got no answer within {timeout}s") from e
        except ChannelForged:
            conn.writer.close()
            raise
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ValueError) as e:
            conn.writer.close()
            raise ChannelClosed(f"{payload.get('op')}: connection lost ({type(e).__name__})") from e
        except BaseException:
            conn.writer.close()  # cancelled mid-request: the stream is out of step
            raise
        self._idle.setdefault(asyncio.get_running_loop(), []).append(conn)
        return body

    def close(self) -> None:
        self._closed = True
        for conns in list(self._idle.values()):
            for conn in conns:
                with contextlib.suppress(RuntimeError):  # its loop is already closed
                    conn.writer.close()
        self._idle.clear()
