"""Run the gateway with uvicorn: in the foreground (`serve`) or on a thread (`serving`)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import uvicorn

from .app import make_app
from .gateway import Gateway


def serve(gw: Gateway, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until interrupted (SIGINT / SIGTERM: uvicorn stops cleanly)."""
    uvicorn.run(make_app(gw), host=host, port=port, log_level="warning")


@contextlib.contextmanager
def serving(
    gw: Gateway, host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 30.0
) -> Iterator[str]:
    """Serve on a background thread (its own event loop); yields the root URL
    (``http://host:port``, without ``/v1``). Port 0 takes a free one."""
    server = uvicorn.Server(uvicorn.Config(make_app(gw), host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="arborl-gateway", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the gateway did not start on {host}:{port} (is the port free?)")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
