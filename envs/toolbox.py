"""Tools: a JSON-schema function the model can call, and a box that checks and runs calls.

    @function_tool
    def add(a: int, b: int) -> int:
        "Add two integers."
        return a + b

    box = ToolBox([add, Tool("bash", "Run a command", {...schema...}, run_bash)])
    box.schemas()                        # OpenAI function list, for the chat template's `tools`
    result = await box.run(ToolCall("add", {"a": 1, "b": 2}))   # ToolResult(content="3", ok=True)

`ToolBox.run` never raises for bad input: an unknown tool, arguments that fail the schema
(wrong types, missing or extra keys) or a tool that raises all come back as a `ToolResult`
with `ok=False`, an `error` kind and a message the model can act on. Only a sandbox that is
gone, wedged or exhausted (`SandboxError` other than `SandboxOpError`) or a tool service
that cannot be reached (`ToolUnavailable`) propagates: the episode cannot go on without
it, and the env ends it cleanly.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import json
import time
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from pydantic import create_model

from arborl.sandboxes import ExecResult, SandboxError, SandboxOpError

from .parsers import ToolCall
from .spaces import clean_text

#: Longest tool result shown to the model, characters (head and tail kept).
MAX_RESULT_CHARS = 32_000


class ToolUnavailable(RuntimeError):
    """The service behind a tool (an MCP server) cannot be reached: an infrastructure error
    that ends the episode as an env error, never an error result the model is scored on."""


@dataclass
class ToolResult:
    """What a tool returns. Tools may also return a plain str (= ok content)."""

    content: str
    ok: bool = True
    #: Error kind when not ok: unknown_tool, invalid_arguments, tool_error, timeout, skipped.
    error: str | None = None
    #: The call ends the episode (submit, final answer); `reward` is its score.
    terminal: bool = False
    reward: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0


ToolFn = Callable[..., Awaitable[ToolResult | str | Any] | ToolResult | str | Any]


def head_tail(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    """`text` cut to about `limit` characters, keeping its head and tail around a marker."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters truncated ...]\n{text[-half:]}"


class Tool:
    """A named function with a JSON schema for its (keyword) arguments."""

    def __init__(self, name: str, description: str, parameters: Mapping[str, Any], fn: ToolFn) -> None:
        try:
            self._validator = _validator(json.dumps(parameters, sort_keys=True, default=str))
        except jsonschema.SchemaError as e:
            raise ValueError(f"tool {name!r} has an invalid parameters schema: {e.message}") from e
        self.name = name
        self.description = description
        self.parameters = dict(parameters)
        self.fn = fn

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def schema(self) -> dict[str, Any]:
        """The OpenAI / Hugging Face chat-template form (a fresh copy)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.parameters),
            },
        }

    def argument_errors(self, arguments: Mapping[str, Any]) -> list[str]:
        """Why `arguments` do not fit the schema (empty when they do)."""
        try:
            errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        except RecursionError:
            return ["arguments are nested too deeply"]
        out = []
        for e in errors[:4]:
            where = "/".join(str(p) for p in e.absolute_path)
            out.append(f"`{where}`: {_short(e.message)}" if where else _short(e.message))
        return out

    async def __call__(self, **arguments: Any) -> Any:
        result = self.fn(**arguments)
        if inspect.isawaitable(result):
            result = await result
        return result


@functools.lru_cache(maxsize=1024)
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    """A checked, compiled validator per distinct schema (checking one costs milliseconds)."""
    schema = json.loads(schema_json)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _short(message: str, n: int = 300) -> str:
    return message if len(message) <= n else message[: n - 3] + "..."


def function_tool(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
) -> Any:
    """Make a `Tool` from a typed function (sync or async); its docstring describes it.

    The schema comes from the signature (pydantic), with `additionalProperties: false`;
    ``Annotated[int, Field(ge=1, description=...)]`` adds bounds and descriptions, and an
    argument ``x: T | None = None`` is an optional ``T`` (left out when not given), not a
    nullable one.
    """

    def build(f: Callable[..., Any]) -> Tool:
        try:  # string annotations (`from __future__ import annotations`), resolved in f's module
            hints = typing.get_type_hints(f, include_extras=True)
        except (NameError, TypeError):
            hints = {}
        fields: dict[str, Any] = {}
        for p in inspect.signature(f).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            ann = hints.get(p.name, Any if p.annotation is p.empty else p.annotation)
            fields[p.name] = (ann, ... if p.default is p.empty else p.default)
        model: Any = create_model(f"{f.__name__}_args", **fields)
        doc = inspect.getdoc(f) or ""
        return Tool(name or f.__name__, description or doc, _parameters(model.model_json_schema()), f)

    return build(fn) if fn is not None else build


#: Key order of a generated property, as a person writes a schema (what the chat template shows).
_KEY_ORDER = ("type", "enum", "items", "minItems", "maxItems", "minimum", "maximum", "description", "default")


def _parameters(raw: dict[str, Any]) -> dict[str, Any]:
    """A pydantic model's JSON schema as a tool's parameters: no titles, optional arguments
    not nullable, keys in the order people write them, no extra keys allowed."""
    properties = {}
    for name, prop in raw.get("properties", {}).items():
        prop.pop("title", None)
        if "anyOf" in prop and "default" in prop and prop["default"] is None:
            members = [m for m in prop.pop("anyOf") if m != {"type": "null"}]
            del prop["default"]
            prop = {**members[0], **prop} if len(members) == 1 else {"anyOf": members, **prop}
        rank = {k: i for i, k in enumerate(_KEY_ORDER)}
        properties[name] = {k: prop[k] for k in sorted(prop, key=lambda k: rank.get(k, len(rank)))}
    params: dict[str, Any] = {"type": "object", "properties": properties}
    if raw.get("required"):
        params["required"] = raw["required"]
    params.update({k: v for k, v in raw.items() if k not in ("type", "title", "properties", "required")})
    params["additionalProperties"] = False
    return params


class ToolBox:
    """The tools of one episode, by name."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self.tools: dict[str, Tool] = {}
        for t in tools:
            if t.name in self.tools:
                raise ValueError(f"two tools are named {t.name!r}")
            self.tools[t.name] = t

    def __contains__(self, name: object) -> bool:
        return name in self.tools

    def __len__(self) -> int:
        return len(self.tools)

    def schemas(self) -> list[dict[str, Any]]:
        """The tool list for the chat template's `tools` field (fresh copies)."""
        return [t.schema() for t in self.tools.values()]

    def parameter_schemas(self) -> dict[str, dict[str, Any]]:
        """Tool name → parameters schema (read-only use: parsers type arguments with it)."""
        return {n: t.parameters for n, t in self.tools.items()}

    def check(self, call: ToolCall) -> ToolResult | None:
        """The error result for a call that cannot run, or None."""
        t = self.tools.get(call.name)
        if t is None:
            names = ", ".join(self.tools) or "(none)"
            return ToolResult(
                f"Error: unknown tool `{call.name[:80]}`. Available tools: {names}.",
                ok=False,
                error="unknown_tool",
            )
        problems = t.argument_errors(call.arguments)
        if problems:
            expected = json.dumps(t.parameters.get("properties", {}), ensure_ascii=False)
            return ToolResult(
                f"Error: invalid arguments for `{t.name}`: "
                + "; ".join(problems)
                + f". Expected parameters: {_short(expected, 1500)}",
                ok=False,
                error="invalid_arguments",
            )
        return None

    async def run(self, call: ToolCall) -> ToolResult:
        """Check and run one call; every failure but a dead sandbox becomes an error result."""
        start = time.perf_counter()
        result = self.check(call)
        if result is None:
            try:
                result = as_result(await self.tools[call.name](**clean_arguments(call.arguments)))
            except SandboxOpError as e:  # an operation failed inside a live sandbox
                result = ToolResult(
                    f"Error: `{call.name}` failed: {_short(str(e), 2000)}", ok=False, error="tool_error"
                )
            except (SandboxError, ToolUnavailable, asyncio.CancelledError):  # infrastructure is gone
                raise
            except Exception as e:
                result = ToolResult(
                    f"Error: `{call.name}` failed: {type(e).__name__}: {_short(str(e), 2000)}",
                    ok=False,
                    error="tool_error",
                )
        result.content = head_tail(result.content)
        result.duration_s = time.perf_counter() - start
        return result


def clean_arguments(value: Any) -> Any:
    """Decoded JSON with every string made UTF-8 encodable (JSON can carry lone surrogates)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_arguments(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_arguments(v) for v in value]
    return value


def as_result(value: Any) -> ToolResult:
    """A tool's return value as a ToolResult (str as is, other data as JSON)."""
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(value)
    try:
        return ToolResult(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return ToolResult(str(value))


def format_exec(r: ExecResult, timeout: float) -> str:
    """Command output as the model sees it, with its exit status on the last line."""
    out = "\n".join(s.rstrip("\n") for s in (r.stdout, r.stderr) if s.rstrip("\n")) or "(no output)"
    notes = [f"exit code: {r.exit_code}"]
    if r.timed_out:
        notes.append(f"timed out after {timeout:g}s: the command was killed")
    if r.oom_killed:
        notes.append("killed: out of memory")
    if r.truncated:
        notes.append(f"output truncated ({r.stdout_bytes + r.stderr_bytes} bytes in all)")
    return f"{out}\n[{'; '.join(notes)}]"
