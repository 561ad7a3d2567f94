"""Tools from MCP servers (the Model Context Protocol), through the `mcp` package's client.

    gymnasium.make("arborl/Tool-v0", mcp_servers=[{"url": "http://search:8000/mcp", "prefix": "web_"}])

At each reset the env lists every configured server's tools (`tools/list`) and offers them
to the model beside the built-ins, named ``prefix + name`` with the server's description and
input schema; a call is checked against that schema by the `ToolBox` first, then sent as
``tools/call``. The result's text blocks are the observation; a result flagged ``isError``
(the server refused the arguments, the tool raised) comes back as an error result the model
can act on. A server that cannot be reached is an infrastructure error (`ToolUnavailable`):
the episode ends as an env error, never as a score.

Transport: Streamable HTTP. Each list or call opens its own short MCP session (an
initialize handshake, about a millisecond on loopback), so a session never has to outlive
the asyncio task that opened it; servers that keep per-session state are not supported.

Where servers run: an MCP server reached over HTTP is a service the operator runs and
trusts (search, a database, an API). A server that executes code the model writes must run
inside the episode's sandbox, never on the host; stdio servers (which arborl would have to
start) are therefore refused here until they can be started inside the sandbox.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..toolbox import Tool, ToolResult, ToolUnavailable


class MCPServerConfig(BaseModel):
    """One MCP server whose tools an episode gets."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = Field(None, description="Streamable HTTP endpoint, e.g. http://host:8000/mcp")
    command: list[str] | None = Field(
        None, description="stdio server command: refused for now (it would run on the host)"
    )
    prefix: str = Field("", description="prepended to each tool name (tells servers' tools apart)")
    tools: tuple[str, ...] | None = Field(None, description="only these tools (server names); None: all")
    timeout_s: float = Field(30.0, gt=0, description="time limit of one list or call")

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerConfig:
        if self.command is not None:
            raise ValueError(
                "stdio MCP servers are not supported yet: a server arborl starts must run inside the "
                "episode's sandbox, never on the host. Serve it over Streamable HTTP and give its url"
            )
        if not self.url:
            raise ValueError(
                "an MCP server needs a url (its Streamable HTTP endpoint, e.g. http://host:8000/mcp)"
            )
        return self


def _client(cfg: MCPServerConfig) -> Any:
    from mcp import Client  # a heavy import, only for envs that use MCP

    return Client(cfg.url or "", read_timeout_seconds=cfg.timeout_s)  # the validator requires a url


def _text(result: Any) -> str:
    parts = []
    for block in result.content or []:
        text = getattr(block, "text", None)
        parts.append(text if text is not None else f"[{getattr(block, 'type', 'content')} block]")
    return "\n".join(parts) or "(no output)"


async def _call(cfg: MCPServerConfig, name: str, args: dict[str, Any]) -> ToolResult:
    try:
        async with _client(cfg) as client:
            result = await client.call_tool(name, args)
    except Exception as e:  # the mcp package raises transport errors of several kinds
        raise ToolUnavailable(f"MCP server {cfg.url} failed on `{name}`: {type(e).__name__}: {e}") from e
    if result.is_error:
        return ToolResult(
            f"Error: `{cfg.prefix}{name}` failed: {_text(result)}", ok=False, error="tool_error"
        )
    return ToolResult(_text(result))


def _tool(cfg: MCPServerConfig, spec: Any) -> Tool:
    name = str(spec.name)

    async def call(**args: Any) -> ToolResult:
        return await _call(cfg, name, args)

    schema = dict(spec.input_schema or {"type": "object", "properties": {}})
    return Tool(cfg.prefix + name, spec.description or "", schema, call)


async def mcp_tools(servers: Sequence[MCPServerConfig | Mapping[str, Any]]) -> list[Tool]:
    """The tools of every server (`tools/list`, all pages), as arborl `Tool`s."""
    tools: list[Tool] = []
    for raw in servers:
        cfg = raw if isinstance(raw, MCPServerConfig) else MCPServerConfig.model_validate(dict(raw))
        try:
            async with _client(cfg) as client:
                listed, cursor = [], None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    listed += list(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
        except Exception as e:
            raise ToolUnavailable(
                f"cannot list the tools of MCP server {cfg.url}: {type(e).__name__}: {e}"
            ) from e
        wanted = set(cfg.tools) if cfg.tools is not None else None
        if wanted is not None and (missing := wanted - {t.name for t in listed}):
            raise ValueError(f"MCP server {cfg.url} has no tools {sorted(missing)}")
        tools += [_tool(cfg, t) for t in listed if wanted is None or t.name in wanted]
    return tools
