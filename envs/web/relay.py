"""Host-side plumbing over unix sockets: a TCP→unix relay and a tiny HTTP client.

Why unix sockets: the web sandboxes sit on a Docker network with no IPv4 address on the
host side (`inhibit_ipv4`), so nothing in them can reach the host, and the host cannot
reach them by IP either. What the harness needs (the browser's DevTools endpoint, each
site's admin endpoints) is published as a unix socket in the sandbox's bind-mounted run
directory instead. Playwright only speaks TCP, hence the relay; the admin client speaks
HTTP/1.0 straight to the socket. Both are a few lines of asyncio, which is why they are
written here rather than pulled in from a library.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any


class SiteRequestError(RuntimeError):
    """A site's admin endpoint did not answer as expected."""


class UnixRelay:
    """Listen on 127.0.0.1:<free port>; pipe every connection to a unix socket."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.port = 0
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()

    async def start(self) -> UnixRelay:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            ureader, uwriter = await asyncio.open_unix_connection(self.socket_path)
        except OSError:
            writer.close()
            return
        self._conns.update((writer, uwriter))
        await asyncio.gather(_pipe(reader, uwriter), _pipe(ureader, writer), return_exceptions=True)
        self._conns.difference_update((writer, uwriter))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._conns):
            w.close()
        self._conns.clear()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def unix_http(socket_path: str, method: str, path: str, timeout: float = 10.0) -> Any:
    """One HTTP/1.0 request over a unix socket; the decoded JSON body."""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_unix_connection(socket_path)
            try:
                writer.write(f"{method} {path} HTTP/1.0\r\nHost: admin\r\nContent-Length: 0\r\n\r\n".encode())
                await writer.drain()
                raw = await reader.read()
            finally:
                writer.close()
    except (OSError, TimeoutError) as e:
        raise SiteRequestError(f"{method} {path} on {socket_path}: {type(e).__name__}: {e}") from e
    head, _, body = raw.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1:2]
    if status != [b"200"]:
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        raise SiteRequestError(f"{method} {path}: {line}: {body[:300].decode('utf-8', 'replace')}")
    return json.loads(body)
