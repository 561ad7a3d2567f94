"""Helpers of the web env tests (imported by module name, like tests/countdown.py)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class CountingServer:
    """An HTTP server the test starts on the host; it counts the requests that reach it."""

    def __init__(self, host: str) -> None:
        hits: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(b"<h1>host secret</h1>")

            def log_message(self, *args: Any) -> None:
                pass

        self.hits = hits
        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def observation_text(obs: Any) -> str:
    from arborl.envs.spaces import observation_messages

    return "\n".join(m["content"] for m in observation_messages(obs))
