"""`arborl envs serve` as a client meets it: a real server subprocess on a loopback port, its
token in `$ARBORL_SERVE_TOKEN` (a server that ignored tokens would still start), and what it
leaves behind (sandboxes labelled with its pid)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ARBORL = str(Path(sys.executable).parent / "arborl")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """`arborl envs serve ARGS --port P` in its own session, output in `log`."""

    def __init__(self, args: list[str], cwd: Path, token: str | None = None) -> None:
        self.port = free_port()
        self.token = token or secrets.token_urlsafe(32)
        self.log = cwd / f"serve-{self.port}.log"
        env = {**os.environ, "ARBORL_SERVE_TOKEN": self.token}
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [ARBORL, "envs", "serve", *args, "--port", str(self.port)],
                cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def url(self, token: str | None = None) -> str:
        """The base URL OpenEnv's client takes, the token as the URL's password."""
        token = self.token if token is None else token
        return f"http://arborl:{token}@127.0.0.1:{self.port}" if token else f"http://127.0.0.1:{self.port}"

    def wait(self, timeout_s: float = 240.0) -> Served:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            health = f"http://127.0.0.1:{self.port}/health"
            with contextlib.suppress(OSError), urllib.request.urlopen(health, timeout=2) as r:
                if r.status == 200:
                    return self
            assert self.proc.poll() is None, self.text()[-3000:]
            time.sleep(0.5)
        raise AssertionError(f"no server on port {self.port}: {self.text()[-3000:]}")

    def http(self, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
        """One HTTP request with `Authorization: Bearer token` (none when token is "")."""
        token = self.token if token is None else token
        headers = {"Content-Type": "application/json"} | (
            {"Authorization": f"Bearer {token}"} if token else {}
        )
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=data, headers=headers, method=method
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 120.0) -> int:
        """Send `sig` to the server alone (not its group) and wait; its exit status."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                return self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                raise AssertionError(
                    f"the server ignored {signal.Signals(sig).name}: {self.text()[-2000:]}"
                ) from None
        return int(self.proc.returncode)


def sandboxes_of(pid: int, seen: Iterable[str] = ()) -> dict[str, list[str]]:
    """The sandboxes process `pid` made that still exist: Docker containers, bwrap sandbox
    directories (both found by the owner labels every backend writes), and the cgroups of
    those and of the `seen` sandbox ids (a directory removed without its cgroup leaks too)."""
    import docker

    from arborl.sandboxes import BwrapBackend
    from arborl.sandboxes.bwrap.cgroups import leftover_ids

    engine = docker.from_env()
    containers = engine.containers.list(all=True, filters={"label": f"arborl.owner_pid={pid}"})
    local = [s.id for s in BwrapBackend().list_sandboxes() if s.owner_pid == pid]
    return {
        "docker": [c.id for c in containers],
        "bwrap": local,
        "cgroups": sorted((set(local) | set(seen)) & leftover_ids()),
    }


def remove_sandboxes_of(pid: int) -> None:
    """Clean up after a failed test: only what `pid` made (others share this machine)."""
    import docker

    from arborl.sandboxes import BwrapBackend
    from arborl.sandboxes.bwrap.cgroups import SandboxCgroups

    with contextlib.suppress(Exception):
        for c in docker.from_env().containers.list(all=True, filters={"label": f"arborl.owner_pid={pid}"}):
            c.remove(force=True)
    backend = BwrapBackend()
    for root, meta in backend._entries():
        if meta.get("arborl.owner_pid") == str(pid):
            SandboxCgroups(meta["arborl.sandbox_id"]).remove()
            backend._remove_dirs(root)
