"""Tool-call parsers: the model's raw reply → tool calls, prose, and readable errors.

A registry of formats, one class each (`@register_parser("name")`):

    hermes       Hermes / Qwen2.5 / Qwen3:  <tool_call>{"name": "f", "arguments": {...}}</tool_call>
    qwen3_coder  Qwen3-Coder XML:           <tool_call><function=f><parameter=x>1</parameter></function></tool_call>
    json         plain JSON:                {"name": "f", "arguments": {...}}  (or a list, or in a ```json block)

Parsers never raise: whatever the text (broken JSON, 1 MB of junk, binary, hundreds of
calls), they return the calls they could read and one error string per thing they could
not, each short and saying what was expected. Scanning is linear in the text length.
`format_call` renders a call in the format (tests, scripted policies, SFT data) and
`instructions` renders the tool list and format for prompts without a chat template.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

#: Most tool-call blocks read from one reply; the rest are reported as one error.
MAX_CALLS_PARSED = 64
SNIPPET = 160


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for."""

    name: str
    arguments: dict[str, Any]
    id: str = ""


@dataclass
class ParseResult:
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: The reply with tool-call markup and thinking removed (the prose, or a final answer).
    content: str = ""


class ToolCallParser(Protocol):
    name: ClassVar[str]

    def parse(self, text: str, schemas: Mapping[str, Mapping[str, Any]] | None = None) -> ParseResult:
        """Read the calls in `text`; `schemas` (tool name → parameters schema) guides typing."""
        ...

    def format_call(self, name: str, arguments: Mapping[str, Any]) -> str: ...

    def format_hint(self) -> str:
        """One example call, for error messages."""
        ...

    def instructions(self, tools: list[dict[str, Any]]) -> str: ...


PARSERS: dict[str, Callable[[], ToolCallParser]] = {}


def register_parser(name: str) -> Callable[[type], type]:
    """Class decorator: make a parser available as `get_parser(name)`."""

    def deco(cls: type) -> type:
        setattr(cls, "name", name)  # noqa: B010 - a class attribute every parser reads
        PARSERS[name] = cls
        return cls

    return deco


def get_parser(parser: str | ToolCallParser) -> ToolCallParser:
    if not isinstance(parser, str):
        return parser
    try:
        return PARSERS[parser]()
    except KeyError:
        raise ValueError(f"unknown tool-call parser {parser!r}; registered: {sorted(PARSERS)}") from None


# ---- shared pieces ----------------------------------------------------------------------
def snippet(text: str, n: int = SNIPPET) -> str:
    text = text.strip()
    return repr(text if len(text) <= n else text[: n // 2] + " ... " + text[-n // 2 :])


def strip_thinking(text: str) -> str:
    """Drop reasoning: everything up to the last `</think>` (templates often open `<think>`)."""
    end = text.rfind("</think>")
    return text[end + len("</think>") :] if end >= 0 else text


def blocks(text: str, open_tag: str, close_tag: str) -> Iterator[tuple[str, str | None, bool]]:
    """Yield (prose before, block body, closed) per `open_tag` block, then (rest, None, True).

    Linear: each search starts where the last ended; an unclosed block runs to the end.
    """
    pos = 0
    while True:
        i = text.find(open_tag, pos)
        if i < 0:
            yield text[pos:], None, True
            return
        j = text.find(close_tag, i + len(open_tag))
        end = len(text) if j < 0 else j
        yield text[pos:i], text[i + len(open_tag) : end], j >= 0
        pos = len(text) if j < 0 else j + len(close_tag)


def call_from_object(obj: Any, index: int) -> ToolCall | str:
    """A ToolCall from a decoded `{"name", "arguments"}` object, or the reason it is not one."""
    if not isinstance(obj, dict):
        return f'a tool call must be a JSON object with "name" and "arguments", got {type(obj).__name__}'
    if isinstance(obj.get("function"), dict):  # OpenAI style {"type": "function", "function": {...}}
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return f'the tool call has no "name" string: {snippet(json.dumps(obj)[:400])}'
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models send the arguments JSON-encoded
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            return f'the "arguments" of `{name[:64]}` are a string that is not a JSON object'
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f'the "arguments" of `{name[:64]}` must be a JSON object, got {type(args).__name__}'
    return ToolCall(name=name.strip()[:256], arguments=args, id=f"call_{index}")


def decode_json(body: str) -> tuple[Any, str | None]:
    try:
        return json.loads(body), None
    except json.JSONDecodeError as e:
        return None, f"invalid JSON ({e.msg} at line {e.lineno} column {e.colno}) in {snippet(body)}"
    except RecursionError:
        return None, "invalid JSON: nested too deeply"


def _tool_list(tools: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)


class _Collector:
    """Accumulates calls and errors, enforcing MAX_CALLS_PARSED."""

    def __init__(self) -> None:
        self.result = ParseResult()
        self.prose: list[str] = []
        self.full = False

    def add(self, item: ToolCall | str) -> None:
        r = self.result
        if len(r.calls) + len(r.errors) >= MAX_CALLS_PARSED:
            if not self.full:
                r.errors.append(
                    f"too many tool calls in one reply: only the first {MAX_CALLS_PARSED} were read"
                )
                self.full = True
            return
        if isinstance(item, ToolCall):
            r.calls.append(item)
        else:
            r.errors.append(item)

    @property
    def index(self) -> int:
        return len(self.result.calls) + len(self.result.errors)

    def done(self) -> ParseResult:
        self.result.content = "".join(self.prose).strip()
        return self.result


# ---- formats ----------------------------------------------------------------------------
@register_parser("hermes")
class HermesParser:
    """Hermes / Qwen2.5 / Qwen3: a JSON object inside each `<tool_call>` block."""

    name: ClassVar[str]
    OPEN, CLOSE = "<tool_call>", "</tool_call>"

    def parse(self, text: str, schemas: Mapping[str, Mapping[str, Any]] | None = None) -> ParseResult:
        out = _Collector()
        for prose, body, closed in blocks(strip_thinking(text), self.OPEN, self.CLOSE):
            out.prose.append(prose)
            if body is None or out.full:
                break
            obj, err = decode_json(body.strip()) if body.strip() else (None, "empty <tool_call> block")
            item = err if err else call_from_object(obj, out.index)
            if isinstance(item, str) and not closed:
                item = f"unterminated <tool_call> (no </tool_call>): {item}"
            out.add(item)
        return out.done()

    def format_call(self, name: str, arguments: Mapping[str, Any]) -> str:
        payload = json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
        return f"{self.OPEN}\n{payload}\n{self.CLOSE}"

    def format_hint(self) -> str:
        return self.format_call("tool_name", {"arg": "value"})

    def instructions(self, tools: list[dict[str, Any]]) -> str:
        return (
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{_tool_list(tools)}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        )


@register_parser("qwen3_coder")
class Qwen3CoderParser:
    """Qwen3-Coder XML: `<function=name>` with one `<parameter=key>` block per argument.

    Values are text; they are typed by the tool's schema (integer, number, boolean, object,
    array are decoded; anything that fails to decode stays a string for validation to report).
    """

    name: ClassVar[str]

    def parse(self, text: str, schemas: Mapping[str, Mapping[str, Any]] | None = None) -> ParseResult:
        out = _Collector()
        text = strip_thinking(text)
        for prose, body, closed in blocks(text, "<function=", "</function>"):
            out.prose.append(prose.replace("<tool_call>", "").replace("</tool_call>", ""))
            if body is None or out.full:
                break
            out.add(self._call(body, closed, out.index, schemas or {}))
        return out.done()

    def _call(
        self, body: str, closed: bool, index: int, schemas: Mapping[str, Mapping[str, Any]]
    ) -> ToolCall | str:
        name, sep, rest = body.partition(">")
        name = name.strip()
        if not sep or not name or "\n" in name:
            return f"malformed <function=...> tag (expected <function=name>): {snippet('<function=' + body)}"
        props = (schemas.get(name) or {}).get("properties") or {}
        args: dict[str, Any] = {}
        for _, value, _closed in blocks(rest, "<parameter=", "</parameter>"):
            if value is None:
                break
            key, psep, raw = value.partition(">")
            key = key.strip()
            if not psep or not key or "\n" in key:
                return (
                    f"malformed <parameter=...> in `{name[:64]}` (expected <parameter=key>value</parameter>)"
                )
            raw = raw.removeprefix("\n").removesuffix("\n")
            spec = props.get(key) if isinstance(props, Mapping) else None
            args[key] = _typed(raw, spec if isinstance(spec, Mapping) else None)
        if not closed and not args and not rest.strip():
            return f"unterminated <function={name[:64]}> (no </function>)"
        return ToolCall(name=name[:256], arguments=args, id=f"call_{index}")

    def format_call(self, name: str, arguments: Mapping[str, Any]) -> str:
        params = "".join(
            f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}\n</parameter>\n"
            for k, v in arguments.items()
        )
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"

    def format_hint(self) -> str:
        return self.format_call("tool_name", {"arg": "value"})

    def instructions(self, tools: list[dict[str, Any]]) -> str:
        return (
            f"# Tools\n\nYou have access to the following functions:\n\n<tools>\n{_tool_list(tools)}\n</tools>\n\n"
            "If you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
            f"{self.format_hint()}"
        )


def _typed(raw: str, spec: Mapping[str, Any] | None) -> Any:
    types = (spec or {}).get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    if not types or "string" in types:
        return raw
    s = raw.strip()
    if "boolean" in types and s.lower() in ("true", "false"):
        return s.lower() == "true"
    if "null" in types and s.lower() in ("null", "none"):
        return None
    try:
        value = json.loads(s)
    except (ValueError, RecursionError):
        return raw
    if isinstance(value, bool) or value is None:
        return raw
    if ("integer" in types and isinstance(value, int)) or (
        "number" in types and isinstance(value, int | float)
    ):
        return value
    if ("object" in types and isinstance(value, dict)) or ("array" in types and isinstance(value, list)):
        return value
    return raw


_FENCE = re.compile(r"```(?:json)?[ \t]*\n(.*?)```", re.DOTALL)
_NAME_KEY = re.compile(r'\{\s*"name"\s*:')
_CALL_KEYS = {"name", "function", "arguments", "parameters", "tool_calls"}


@register_parser("json")
class JsonParser:
    """Plain JSON: the reply is a call object, a list of them, or has one in a ```json block.

    A reply that is not JSON at all is prose (no calls, no errors), so a final answer in
    words is not mistaken for a broken call.
    """

    name: ClassVar[str]

    def parse(self, text: str, schemas: Mapping[str, Mapping[str, Any]] | None = None) -> ParseResult:
        out = _Collector()
        stripped = strip_thinking(text).strip()
        body, prose = self._locate(stripped)
        out.prose.append(prose)
        if body is None:
            return out.done()
        values, rest, error = self._decode_all(body)
        if error:
            out.add(error)
        out.prose.append(rest)
        if len(values) == 1 and isinstance(values[0], dict) and not (_CALL_KEYS & values[0].keys()):
            out.prose[:] = [stripped]  # JSON data, not a call: it is the content
            return out.done()
        for value in values:
            if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
                value = value["tool_calls"]
            for item in value if isinstance(value, list) else [value]:
                if out.full:
                    break
                out.add(call_from_object(item, out.index))
        return out.done()

    @staticmethod
    def _decode_all(body: str) -> tuple[list[Any], str, str | None]:
        """Every JSON value at the start of `body` (separated by whitespace), the rest, an error."""
        decoder, pos = json.JSONDecoder(), 0
        values: list[Any] = []
        while pos < len(body) and len(values) <= MAX_CALLS_PARSED:
            try:
                value, pos = decoder.raw_decode(body, pos)
            except json.JSONDecodeError as e:
                if values:
                    break
                return (
                    [],
                    "",
                    f"invalid JSON ({e.msg} at line {e.lineno} column {e.colno}) in {snippet(body)}",
                )
            except RecursionError:
                return [], "", "invalid JSON: nested too deeply"
            values.append(value)
            while pos < len(body) and body[pos].isspace():
                pos += 1
            if pos < len(body) and body[pos] not in "{[":
                break
        return values, body[pos:], None

    @staticmethod
    def _locate(text: str) -> tuple[str | None, str]:
        """(JSON text to decode, prose around it); None when the reply holds no call."""
        if text.startswith(("{", "[")):
            return text, ""
        fence = _FENCE.search(text) if "```" in text else None
        if fence and fence.group(1).lstrip().startswith(("{", "[")):
            return fence.group(1).strip(), text[: fence.start()] + text[fence.end() :]
        m = _NAME_KEY.search(text)
        if m:
            return text[m.start() :], text[: m.start()]
        return None, text

    def format_call(self, name: str, arguments: Mapping[str, Any]) -> str:
        return json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)

    def format_hint(self) -> str:
        return self.format_call("tool_name", {"arg": "value"})

    def instructions(self, tools: list[dict[str, Any]]) -> str:
        return (
            f"# Tools\n\nYou can call these functions:\n{_tool_list(tools)}\n\n"
            f"To call one, reply with only a JSON object: {self.format_hint()}\n"
            "(or a JSON list of such objects to call several)."
        )
