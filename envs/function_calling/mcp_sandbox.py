"""An MCP stdio server started inside the episode's sandbox, spoken to through `mcp_relay.py`.

The sandbox API has no streaming exec (a command runs to completion, then its output comes
back), so the server cannot simply be a child whose pipes the harness holds. Instead the
relay, started in the sandbox as the agent, holds the server's pipes; this transport sends
each client message with one short command (`cat` into the relay's fifo) and long-polls the
server's output with another (`relay.py recv`, which returns as soon as a message is there).

Nothing runs on the host. The relay and the server are ordinary processes of the sandbox:
the reset that ends every lease kills them. The episode's directory has a random name, and
a closed transport sends nothing more, so a sandbox handed to the next episode never hears
from this one.
"""

from __future__ import annotations

import contextlib
import secrets
import shlex
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio

from arborl.sandboxes import Sandbox

RELAY = Path(__file__).with_name("mcp_relay.py")
POLL_S = 5.0  # how long one `recv` waits in the sandbox for a message
MAX_OUTPUT = 12 << 20  # above the relay's batch plus one message of its largest size


class ServerStartError(RuntimeError):
    """The server could not be started in the sandbox (staging or the relay failed)."""


class SandboxStdio:
    """One stdio server of one episode, in that episode's sandbox."""

    def __init__(
        self,
        sandbox: Sandbox,
        command: list[str],
        *,
        env: Mapping[str, str],
        cwd: str | None,
        python: str = "python3",
    ) -> None:
        self.sandbox = sandbox
        self.command = command
        self.env = dict(env)
        self.cwd = cwd
        self.python = python
        self.dir = f"/tmp/.arborl-mcp-{secrets.token_hex(8)}"
        self.closed = False
        self.exit_reason = ""

    def _relay(self, *args: str) -> list[str]:
        # -I -S: the relay needs only the stdlib, and starts faster without site-packages
        return [self.python, "-I", "-S", f"{self.dir}/relay.py", *args]

    async def start(self, uploads: Mapping[str, Path], timeout: float) -> None:
        """Stage the uploads, put the relay in place and start the server behind it."""
        sb = self.sandbox
        for dest, src in uploads.items():
            await sb.upload(src.read_bytes() if src.is_file() else src, dest)
        await sb.write_file(f"{self.dir}/relay.py", RELAY.read_bytes(), mode=0o600)
        r = await sb.exec(
            self._relay("start", self.dir, *self.command), timeout=timeout, env=self.env, workdir=self.cwd
        )
        if not r.ok or "ready" not in r.stdout:
            raise ServerStartError(
                f"cannot start `{shlex.join(self.command)}` in the sandbox: {r.output[-2000:]}"
            )

    async def _send(self, line: str) -> None:
        if self.closed:
            return
        r = await self.sandbox.exec(
            ["/bin/sh", "-c", 'cat > "$1"', "sh", f"{self.dir}/in"], stdin=line, timeout=30.0
        )
        if not r.ok:
            raise ConnectionError(f"the relay refused a message: {r.output[-500:]}")

    async def _recv(self) -> list[str] | None:
        """The server's next messages (None once it exited)."""
        r = await self.sandbox.exec(
            self._relay("recv", self.dir, str(POLL_S)), timeout=POLL_S + 30.0, max_output=MAX_OUTPUT
        )
        if r.exit_code == 3:
            self.exit_reason = r.stderr.strip()
            return None
        if not r.ok or r.truncated:
            raise ConnectionError(f"the relay failed: {r.output[-500:]}")
        return [line for line in r.stdout.splitlines() if line.strip()]

    @contextlib.asynccontextmanager
    async def streams(self) -> AsyncIterator[tuple[Any, Any]]:
        """The (read, write) streams of `mcp`'s `Transport` protocol."""
        import mcp_types
        from mcp.shared.message import SessionMessage

        read_send, read_recv = anyio.create_memory_object_stream[Any](16)
        write_send, write_recv = anyio.create_memory_object_stream[Any](16)

        async def reader() -> None:
            async with read_send:
                while not self.closed:
                    try:
                        lines = await self._recv()
                    except Exception as e:  # the sandbox went away: the session ends
                        await read_send.send(e)
                        return
                    if lines is None:
                        return  # read stream closes: pending requests fail
                    for line in lines:
                        try:
                            msg: Any = SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line))
                        except ValueError as e:
                            msg = e
                        await read_send.send(msg)

        async def writer() -> None:
            async with write_recv:
                async for message in write_recv:
                    await self._send(
                        message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    )

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            try:
                yield read_recv, write_send
            finally:
                self.closed = True
                tg.cancel_scope.cancel()
