"""Host side of the long-lived channel to a sandbox's `agent_server` (unix socket).

Connections are kept open and reused; a request that finds none idle opens another, so
concurrent commands in one sandbox do not queue behind each other. Connections belong to
the event loop that opened them (asyncio streams cannot move between loops), so idle
connections are kept per loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct
import time
import weakref
from typing import Any

_HEADER = struct.Struct(">I")


class ChannelClosed(ConnectionError):
    """The server end went away (the sandbox died or the server crashed)."""


class ChannelTimeout(TimeoutError):
    """The server did not answer within the deadline."""


class Channel:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._idle: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]
        ] = weakref.WeakKeyDictionary()
        self._closed = False

    async def wait_ready(self, timeout: float) -> dict[str, Any]:
        """Poll until the server answers a ping; raises ChannelTimeout after `timeout` s."""
        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            if os.path.exists(self.socket_path):
                try:
                    return await self.request({"op": "ping"}, timeout=max(0.1, deadline - time.monotonic()))
                except (ChannelClosed, OSError):
                    pass
            if time.monotonic() >= deadline:
                raise ChannelTimeout(f"no answer on {self.socket_path} after {timeout:.1f}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        idle = self._idle.setdefault(asyncio.get_running_loop(), [])
        while idle:
            reader, writer = idle.pop()
            if not writer.is_closing() and not reader.at_eof():
                return reader, writer
        try:
            return await asyncio.open_unix_connection(self.socket_path, limit=2**20)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise ChannelClosed(f"cannot connect to {self.socket_path}: {e}") from e

    async def request(self, payload: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Send one request and wait for its response (at most `timeout` seconds)."""
        if self._closed:
            raise ChannelClosed("channel is closed")
        reader, writer = await self._connection()
        data = json.dumps(payload).encode()
        try:
            writer.write(_HEADER.pack(len(data)) + data)
            await writer.drain()
            async with asyncio.timeout(timeout):
                (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
                body = await reader.readexactly(size)
        except TimeoutError as e:
            writer.close()  # the late answer would land on the next request: drop the connection
            raise ChannelTimeout(f"{payload.get('op')} got no answer within {timeout}s") from e
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            writer.close()
            raise ChannelClosed(f"{payload.get('op')}: connection lost ({type(e).__name__})") from e
        except BaseException:
            writer.close()  # cancelled mid-request: the stream is out of step
            raise
        self._idle.setdefault(asyncio.get_running_loop(), []).append((reader, writer))
        return json.loads(body)

    def close(self) -> None:
        self._closed = True
        for conns in list(self._idle.values()):
            for _, writer in conns:
                with contextlib.suppress(RuntimeError):  # its loop is already closed
                    writer.close()
        self._idle.clear()
