"""Tools from MCP servers (the Model Context Protocol), through the `mcp` package's client.

    gymnasium.make("arborl/Tool-v0", mcp_servers=[
        {"url": "http://search:8000/mcp", "prefix": "web_"},              # Streamable HTTP
        {"command": ["python3", "-m", "my_server"], "prefix": "py_"},     # stdio, in the sandbox
    ])

At each reset the env opens one MCP session per configured server, lists its tools
(`tools/list`) and offers them to the model beside the built-ins, named ``prefix + name``
with the server's description and input schema; a call is checked against that schema by the
`ToolBox` first, then sent as ``tools/call`` on the episode's session. The result's text
blocks are the observation; a result flagged ``isError`` (the server refused the arguments,
the tool raised) comes back as an error result the model can act on. The sessions end with
the episode: one episode's session state (a server's per-session memory) never reaches another.
Servers that keep per-session state need `mode="legacy"` (the initialize handshake): on the
2026-07-28 protocol, which `mcp` negotiates by default, every request stands alone.

Where servers run:
- An HTTP server is a service the operator runs and trusts (search, a database, an API).
  One that cannot be reached is an infrastructure error (`ToolUnavailable`): the episode ends
  as an env error, never as a score.
- A stdio server is started by arborl inside the episode's sandbox, as the agent, never on
  the host (`mcp_sandbox.py`): a server that executes code the model writes must run there.
  It needs python3 in the sandbox (for the relay); `upload` stages its code (a host directory
  or tar archive per sandbox directory) before it starts, each episode. The reset that ends
  the lease kills it. Failing to start it is an infrastructure error; once the episode runs,
  the agent can reach the server (it is the agent's own process), so a server that died or
  stopped answering is an error result the model sees, never an env error the agent could
  cause to escape its score.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from arborl.sandboxes import Sandbox

from ..toolbox import Tool, ToolResult, ToolUnavailable
from .mcp_sandbox import SandboxStdio


class MCPServerConfig(BaseModel):
    """One MCP server whose tools an episode gets."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = Field(None, description="Streamable HTTP endpoint, e.g. http://host:8000/mcp")
    command: tuple[str, ...] | None = Field(
        None, description="stdio server: the argv started inside the episode's sandbox"
    )
    env: dict[str, str] = Field(default_factory=dict, description="stdio: environment of the server")
    cwd: str | None = Field(None, description="stdio: working directory (default: the sandbox's)")
    upload: dict[str, str] = Field(
        default_factory=dict,
        description="stdio: {sandbox directory: host directory or tar archive} copied in before it starts",
    )
    prefix: str = Field("", description="prepended to each tool name (tells servers' tools apart)")
    tools: tuple[str, ...] | None = Field(None, description="only these tools (server names); None: all")
    timeout_s: float = Field(30.0, gt=0, description="time limit of one list or call (and of a start)")
    mode: Literal["auto", "legacy"] = Field(
        "auto",
        description="protocol: auto (2026-07-28 where the server speaks it: every request stands "
        "alone) or legacy (the initialize handshake: one session per episode, for servers that "
        "keep per-session state)",
    )

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerConfig:
        if (self.url is None) == (self.command is None):
            raise ValueError(
                "an MCP server needs either a url (its Streamable HTTP endpoint, e.g. "
                "http://host:8000/mcp) or a command (a stdio server, started inside the sandbox)"
            )
        if self.command is not None and not self.command:
            raise ValueError(
                "an MCP stdio server's command is empty: give its argv, e.g. ['python3', 'server.py']"
            )
        if self.url is not None and (self.env or self.cwd or self.upload):
            raise ValueError("env, cwd and upload are for stdio servers (command), not url ones")
        for dest, src in self.upload.items():
            if not dest.startswith("/"):
                raise ValueError(f"upload destination {dest!r} must be an absolute path in the sandbox")
            if not Path(src).exists():
                raise ValueError(f"upload source {src!r} does not exist on the host")
        return self

    @property
    def name(self) -> str:
        return self.url or " ".join(self.command or ())

    @property
    def in_sandbox(self) -> bool:
        return self.command is not None


def as_configs(servers: Sequence[MCPServerConfig | Mapping[str, Any]]) -> list[MCPServerConfig]:
    return [c if isinstance(c, MCPServerConfig) else MCPServerConfig.model_validate(dict(c)) for c in servers]


class MCPSession:
    """One server's MCP session for one episode, owned by a task of its own: `mcp`'s client
    runs task groups that must exit in the task that entered them, while the env's steps are
    separate tasks. `close()` is synchronous, for the env's end of episode."""

    def __init__(self, cfg: MCPServerConfig) -> None:
        self.cfg = cfg
        self.client: Any = None
        self.stdio: SandboxStdio | None = None
        self._task: asyncio.Task[None] | None = None

    async def open(self, sandbox: Callable[[], Awaitable[Sandbox]]) -> None:
        cfg = self.cfg
        if cfg.command is not None:
            self.stdio = SandboxStdio(await sandbox(), list(cfg.command), env=cfg.env, cwd=cfg.cwd)
            try:
                uploads = {dest: Path(src) for dest, src in cfg.upload.items()}
                await self.stdio.start(uploads, timeout=cfg.timeout_s + 60.0)
            except Exception as e:
                raise ToolUnavailable(f"MCP server `{cfg.name}`: {e}") from e
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.get_running_loop().create_task(self._own(ready))
        try:
            await ready
        except Exception as e:
            self.close()
            if self.stdio is not None and self.stdio.exit_reason:
                raise ToolUnavailable(f"MCP server `{cfg.name}`: {self.stdio.exit_reason}") from e
            raise ToolUnavailable(
                f"cannot list the tools of MCP server {cfg.name}: no session: {type(e).__name__}: {e}"
            ) from e

    async def _own(self, ready: asyncio.Future[None]) -> None:
        from mcp import Client  # a heavy import, only for envs that use MCP

        server: Any = self.stdio.streams() if self.stdio is not None else self.cfg.url
        try:
            async with Client(server, read_timeout_seconds=self.cfg.timeout_s, mode=self.cfg.mode) as client:
                self.client = client
                ready.set_result(None)
                await asyncio.Event().wait()  # until close() cancels this task
        except BaseException as e:
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else RuntimeError(repr(e)))
            if not isinstance(e, Exception):
                raise
        finally:
            self.client = None

    def close(self) -> None:
        if self.stdio is not None:
            self.stdio.closed = True  # not one more command reaches the sandbox
        if self._task is not None:
            self._task.cancel()

    async def list_tools(self) -> list[Any]:
        listed, cursor = [], None
        while True:
            page = await self.client.list_tools(cursor=cursor)
            listed += list(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return listed

    async def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        shown = f"{self.cfg.prefix}{name}"
        try:
            if self.client is None:
                raise ConnectionError("the session has ended")
            result = await self.client.call_tool(name, args)
        except Exception as e:  # the mcp package raises transport errors of several kinds
            if self.cfg.in_sandbox:  # the agent's own process: its failure is the agent's
                why = (self.stdio.exit_reason if self.stdio else "") or f"{type(e).__name__}: {e}"
                return ToolResult(
                    f"Error: `{shown}`: the MCP server failed: {why}", ok=False, error="tool_error"
                )
            raise ToolUnavailable(
                f"MCP server {self.cfg.name} failed on `{name}`: {type(e).__name__}: {e}"
            ) from e
        if result.is_error:
            return ToolResult(f"Error: `{shown}` failed: {_text(result)}", ok=False, error="tool_error")
        return ToolResult(_text(result))


def _text(result: Any) -> str:
    parts = []
    for block in result.content or []:
        text = getattr(block, "text", None)
        parts.append(text if text is not None else f"[{getattr(block, 'type', 'content')} block]")
    return "\n".join(parts) or "(no output)"


def _tool(session: MCPSession, spec: Any) -> Tool:
    name = str(spec.name)

    async def call(**args: Any) -> ToolResult:
        return await session.call(name, args)

    schema = dict(spec.input_schema or {"type": "object", "properties": {}})
    return Tool(session.cfg.prefix + name, spec.description or "", schema, call)


async def open_sessions(
    configs: Sequence[MCPServerConfig], sandbox: Callable[[], Awaitable[Sandbox]]
) -> tuple[list[MCPSession], list[Tool]]:
    """One session per server for an episode, and their tools (`tools/list`, all pages).
    `sandbox` gives the episode's sandbox, where stdio servers start."""
    sessions: list[MCPSession] = []
    tools: list[Tool] = []
    try:
        for cfg in configs:
            session = MCPSession(cfg)
            sessions.append(session)
            await session.open(sandbox)
            try:
                listed = await session.list_tools()
            except Exception as e:
                raise ToolUnavailable(
                    f"cannot list the tools of MCP server {cfg.name}: {type(e).__name__}: {e}"
                ) from e
            wanted = set(cfg.tools) if cfg.tools is not None else None
            if wanted is not None and (missing := wanted - {t.name for t in listed}):
                raise ValueError(f"MCP server {cfg.name} has no tools {sorted(missing)}")
            tools += [_tool(session, t) for t in listed if wanted is None or t.name in wanted]
    except BaseException:
        close_sessions(sessions)
        raise
    return sessions, tools


def close_sessions(sessions: Sequence[MCPSession]) -> None:
    for session in sessions:
        with contextlib.suppress(Exception):
            session.close()
