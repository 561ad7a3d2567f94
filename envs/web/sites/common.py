"""Plumbing shared by the self-hosted sites: routing, forms, cookies, HTML, the admin socket.

Standard library only, on purpose: the sites run inside `arborl/base` containers, which
have Debian's python3 and no pip (and on the bubblewrap backend, under the host's python3). A
site is a `Site` subclass with `routes`, a `reset()` that puts its state back to the seed
data, and `state()`, the JSON its evaluators read.

Two listeners per site:
- the public one (TCP), what the browser sees;
- the admin one (a unix socket only the harness can reach: the browser has no way to open
  one), serving `GET /state`, `POST /reset` and `GET /ping`. Evaluators check the real
  backend state through it, and episodes start from fresh state with one request.
"""

from __future__ import annotations

import html
import json
import os
import re
import socketserver
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

MAX_BODY = 1 << 20


def esc(value: Any) -> str:
    """HTML-escape any value."""
    return html.escape(str(value), quote=True)


class Request:
    """One parsed request: method, path, query and form fields (first value of each)."""

    def __init__(self, method: str, target: str, headers: Any, body: bytes) -> None:
        parts = urlsplit(target)
        self.method = method
        self.path = parts.path or "/"
        self.query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        self.form: dict[str, str] = {}
        self.form_lists: dict[str, list[str]] = {}
        if body and "application/x-www-form-urlencoded" in (headers.get("Content-Type") or ""):
            self.form_lists = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
            self.form = {k: v[0] for k, v in self.form_lists.items()}
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("Cookie") or "")
        except Exception:  # a malformed cookie header is the client's problem, not a crash
            cookie = SimpleCookie()
        self.cookies = {k: m.value for k, m in cookie.items()}
        self.params: dict[str, str] = {}


class Response:
    def __init__(
        self,
        body: str = "",
        status: int = 200,
        content_type: str = "text/html; charset=utf-8",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.body = body
        self.status = status
        self.content_type = content_type
        self.headers = dict(headers or {})

    @classmethod
    def redirect(cls, location: str, cookie: str | None = None) -> Response:
        headers = {"Location": location}
        if cookie is not None:
            headers["Set-Cookie"] = cookie
        return cls("", HTTPStatus.SEE_OTHER, headers=headers)

    @classmethod
    def json(cls, obj: Any, status: int = 200) -> Response:
        return cls(json.dumps(obj, sort_keys=True), status, "application/json")


Handler = Callable[[Request], Response]


class Site:
    """A site: routes over state that `reset()` restores and `state()` exposes to evaluators."""

    name = "site"
    title = "Site"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self.reset()

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        self.routes.append((method, re.compile(f"^{pattern}$"), handler))

    def reset(self) -> None:
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        raise NotImplementedError

    def nav(self, req: Request) -> str:
        return ""

    def page(self, req: Request, title: str, body: str, status: int = 200) -> Response:
        doc = (
            "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{esc(title)} - {esc(self.title)}</title><style>{STYLE}</style></head>"
            f"<body><header>{self.nav(req)}</header><main>{body}</main></body></html>"
        )
        return Response(doc, status)

    def not_found(self, req: Request) -> Response:
        return self.page(req, "Not found", f"<h1>Page not found</h1><p>No page at {esc(req.path)}.</p>", 404)

    def dispatch(self, req: Request) -> Response:
        allowed = False
        for method, pattern, handler in self.routes:
            m = pattern.match(req.path)
            if m is None:
                continue
            if method != req.method:
                allowed = True
                continue
            req.params = m.groupdict()
            with self.lock:
                return handler(req)
        if allowed:
            return self.page(req, "Not allowed", "<h1>Method not allowed</h1>", 405)
        return self.not_found(req)

    def admin(self, req: Request) -> Response:
        """The harness's endpoints (admin socket only)."""
        with self.lock:
            if req.path == "/ping":
                return Response.json({"ok": True, "site": self.name, "pid": os.getpid()})
            if req.path == "/state" and req.method == "GET":
                return Response.json(self.state())
            if req.path == "/reset" and req.method == "POST":
                self.reset()
                return Response.json({"ok": True})
        return Response.json({"error": f"no admin endpoint {req.method} {req.path}"}, 404)


STYLE = (
    "body{font-family:DejaVu Sans,sans-serif;margin:0;font-size:15px}"
    "header{background:#234;color:#fff;padding:8px 16px}header a{color:#fff;margin-right:14px}"
    "main{padding:12px 24px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px}"
    ".menu{display:inline-block;position:relative}.menu .sub{display:none;position:absolute;"
    "background:#345;padding:6px;z-index:2}.menu:hover .sub{display:block}.sub a{display:block}"
    ".error{color:#b00}.notice{color:#070}label{display:block;margin-top:6px}"
)


def make_handler(site: Site, admin: bool) -> type[BaseHTTPRequestHandler]:
    class SiteHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = f"arborl-{site.name}"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self.send_error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
                return
            body = self.rfile.read(length) if length else b""
            req = Request(self.command, self.path, self.headers, body)
            try:
                resp = site.admin(req) if admin else site.dispatch(req)
            except Exception as e:  # a site bug is a 500 page, never a dead server
                resp = Response(f"<h1>Internal error</h1><pre>{esc(type(e).__name__)}: {esc(e)}</pre>", 500)
            data = resp.body.encode("utf-8")
            self.send_response(resp.status)
            self.send_header("Content-Type", resp.content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            for key, value in resp.headers.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_HEAD = _serve

        def address_string(self) -> str:  # unix-socket peers have no address
            return "admin" if admin else super().address_string()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return SiteHandler


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _TcpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(site: Site, host: str, port: int, admin_socket: str, port_file: str | None = None) -> None:
    """Serve `site` publicly on host:port and to the harness on `admin_socket`, forever."""
    public = _TcpServer((host, port), make_handler(site, admin=False))
    if os.path.exists(admin_socket):
        os.unlink(admin_socket)
    admin = _UnixServer(admin_socket, make_handler(site, admin=True))
    os.chmod(admin_socket, 0o600)
    if port_file:  # port 0 asked the kernel for a free port: tell the harness which
        tmp = f"{port_file}.tmp"
        with open(tmp, "w") as f:
            f.write(str(public.server_address[1]))
        os.replace(tmp, port_file)
    threading.Thread(target=admin.serve_forever, daemon=True).start()
    try:
        public.serve_forever()
    finally:
        public.server_close()
        admin.server_close()
