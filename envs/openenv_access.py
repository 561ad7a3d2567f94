"""Who may use `arborl envs serve`: a token on every request, and loopback unless the operator says.

A served env runs its client's actions in sandboxes, so every request but `/health` must
carry the server's token, in either form a client can send:

- `Authorization: Bearer <token>` (curl, httpx, a WebSocket client that sets headers);
- `Authorization: Basic base64(<any user>:<token>)`: what a URL's user info becomes. It is the
  one way OpenEnv's own client (`GenericEnvClient`, `EnvClient`) can carry it, since that
  client opens its WebSocket without headers of its own:
  `GenericEnvClient(base_url="http://arborl:<token>@127.0.0.1:8000")`.

`/health` stays open (it answers only "healthy"), so probes and start-up waits need no token.
The token comes from a file (made, 0600, with a new token when missing), from
`$ARBORL_SERVE_TOKEN`, or is made new for the run; never from the command line, where every
user of the machine could read it in the process list.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import logging
import os
import re
import secrets
import socket
import stat
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

TOKEN_ENV = "ARBORL_SERVE_TOKEN"
#: Printable ASCII without spaces (a header value and a URL password carry it as it is, once
#: percent-encoded), and long enough that guessing is hopeless.
_TOKEN_FORM = re.compile(r"[!-~]{16,}")
OPEN_PATHS = frozenset({"/health"})

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class AccessError(ValueError):
    """The server's token or address is not acceptable; the message says what to do."""


def new_token() -> str:
    """A fresh token: 32 random bytes, URL-safe (no escaping needed in a URL or a header)."""
    return secrets.token_urlsafe(32)


def _checked(token: str, source: str) -> str:
    token = token.strip()
    if not _TOKEN_FORM.fullmatch(token):
        raise AccessError(
            f"the token from {source} must be at least 16 printable ASCII characters without spaces; "
            f"make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return token


def _read_token_file(path: Path) -> str:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise AccessError(f"{path} is readable by other users (mode {stat.filemode(mode)}): chmod 600 {path}")
    return _checked(path.read_text(encoding="utf-8"), str(path))


def _write_token_file(path: Path) -> str:
    token = new_token()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never over someone's file
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    return token


def load_token(
    token_file: str | Path | None = None, environ: Mapping[str, str] = os.environ
) -> tuple[str, str]:
    """The server's token and where it came from (a phrase for the operator).

    In order: `token_file` (read; when missing, made with a new token, mode 0600), then
    `$ARBORL_SERVE_TOKEN`, then a new token for this run only.
    """
    if token_file is not None:
        path = Path(token_file)
        if path.exists():
            return _read_token_file(path), f"read from {path}"
        try:
            return _write_token_file(path), f"new, written to {path} (mode 0600)"
        except OSError as e:
            raise AccessError(f"cannot write a new token to {path}: {e}") from None
    if environ.get(TOKEN_ENV):
        return _checked(environ[TOKEN_ENV], f"${TOKEN_ENV}"), f"from ${TOKEN_ENV}"
    return new_token(), "new for this run (pass --token-file or set $ARBORL_SERVE_TOKEN to keep one)"


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (`0.0.0.0` and `::` are not)."""
    if not host:
        return False
    try:
        infos = socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError) as e:
        raise AccessError(f"cannot resolve --host {host!r}: {e}") from None
    addresses = {str(info[4][0]).split("%")[0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def check_bind(host: str, allow_remote: bool) -> None:
    """Refuse an address other machines can reach unless the operator asked for it."""
    if allow_remote or is_loopback(host):
        return
    raise AccessError(
        f"--host {host} listens beyond this machine: whoever reaches it with the token runs code in "
        "your sandboxes, and the token travels in clear text unless a TLS proxy stands in front. "
        "Add --allow-remote if that is what you mean; otherwise leave --host at 127.0.0.1"
    )


def presented_token(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The token an `Authorization` header carries (Bearer, or Basic's password), if any."""
    value = next((v for k, v in headers if k.lower() == b"authorization"), None)
    if value is None:
        return None
    scheme, _, credentials = value.strip().partition(b" ")
    if scheme.lower() == b"bearer":
        return credentials.strip()
    if scheme.lower() == b"basic":
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True)
        except (binascii.Error, ValueError):
            return None
        return decoded.partition(b":")[2]
    return None


REFUSAL = (
    "this server needs its token: send `Authorization: Bearer <token>`, or, with OpenEnv's "
    "client, put it in the URL: GenericEnvClient(base_url='http://arborl:<token>@HOST:PORT')"
)


class TokenGate:
    """ASGI middleware: HTTP requests (401) and WebSocket handshakes (403) without the token
    are refused before they reach OpenEnv's routes, whichever routes those are (its web UI and MCP
    endpoints included); the comparison takes the same time whatever the guess."""

    def __init__(self, app: ASGIApp, token: str, open_paths: frozenset[str] = OPEN_PATHS) -> None:
        self.app = app
        self._token = token.encode()
        self.open_paths = open_paths

    def authorized(self, scope: Scope) -> bool:
        got = presented_token(list(scope.get("headers", [])))
        return got is not None and hmac.compare_digest(got, self._token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] not in ("http", "websocket")
            or scope["path"] in self.open_paths
            or self.authorized(scope)
        ):
            await self.app(scope, receive, send)
            return
        client = scope.get("client") or ("?", 0)
        log.warning("refused %s %s from %s: no or wrong token", scope["type"], scope["path"], client[0])
        await self._refuse(scope, receive, send)

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            # Closing before the handshake answers HTTP 403. A 401 through the denial-response
            # extension would say more, but uvicorn (0.54) then logs an error for every refusal.
            await send({"type": "websocket.close", "code": 1008, "reason": "token required"})
            return
        from starlette.responses import JSONResponse

        response = JSONResponse({"detail": REFUSAL}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)
