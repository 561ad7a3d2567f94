"""A bfcl-eval result's `result` decoded as bfcl-eval's model handlers decode it.

bfcl-eval stores each reply in the form its model's handler produced it and, when scoring,
decodes it with that handler's `decode_ast` (AST and relevance categories: `[{name: {param:
value}}]`) or `decode_execute` (multi-turn: one Python call string per call, which its
executor `eval`s). Three forms cover its handlers but the few with formats of their own:

- `fc`: function-calling APIs. OpenAI (completions and responses), Claude, Mistral, DeepSeek,
  Grok, Qwen's API, ...: `[{"math_gcd": "{\"a\": 12, \"b\": 18}"}]` (JSON-text arguments);
  Gemini and Nova: `[{"math_gcd": {"a": 12, "b": 18}}]`. A reply that made no call is stored
  as its text and fails to decode. `decode_ast` is the OpenAI handler's (its four lines,
  here with an arguments object taken as it is, as Gemini's handler takes it);
  `decode_execute` is bfcl-eval's `convert_to_function_call`.
- `prompting`: prompted models (every API handler's non-FC mode, the local handlers built on
  its `OSSHandler`): the reply text, a Python list of calls `[math.gcd(a=12, b=18)]` (Java
  and JavaScript: their own call syntax), decoded by bfcl-eval's `default_decode_ast_prompting`
  / `default_decode_execute_prompting`.
- `hermes`: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` text, as bfcl-eval's
  `QwenFCHandler` stores and decodes it (its `_extract_tool_calls` pattern; arborl's own
  agents reply in this form too).

One difference, on purpose: bfcl-eval's Python call parser `eval`s an argument that is an
arithmetic expression (`a=3*4`), whatever the operands are. Here an expression of anything
but number and string constants (a name, a call, an attribute: model-written code) is not
evaluated; the reply counts as one that failed to decode (`UnsafeExpression`).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Literal

from .official import bfcl_decoders

Decoder = Literal["fc", "prompting", "hermes"]
DECODERS: tuple[Decoder, ...] = ("fc", "prompting", "hermes")
#: `QwenFCHandler._extract_tool_calls`'s pattern.
_HERMES = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.DOTALL)
_SAFE_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_MAX_CONSTANT, _MAX_EXPONENT, _MAX_NODES = 10**12, 64, 64


class UnsafeExpression(ValueError):
    """A prompted reply's argument is an expression bfcl-eval would `eval` and arborl does not."""


def decode_ast(result: Any, decoder: Decoder, language: str = "PYTHON") -> Any:
    """`handler.decode_ast(result, return_format, has_tool_call_tag=False)`, the return format
    being the checker's language (as `ast_file_runner` picks it); raises what the handler
    raises on output it cannot decode."""
    if decoder == "fc":
        decoded = []
        for invoked_function in result:
            name = next(iter(invoked_function))
            params = invoked_function[name]
            decoded.append({name: json.loads(params) if isinstance(params, str) else params})
        return decoded
    if decoder == "hermes":
        return [{call["name"]: dict(call["arguments"].items())} for call in _hermes_calls(result)]
    lib = bfcl_decoders()
    if language == "PYTHON":
        _check_expressions(result)
    return lib.decode_ast_prompting(result, lib.ReturnFormat[language], False)


def decode_execute(result: Any, decoder: Decoder) -> list[str]:
    """`handler.decode_execute(result, has_tool_call_tag=False)`: one call string per call."""
    lib = bfcl_decoders()
    if decoder == "fc":
        return list(lib.convert_to_function_call(result))
    if decoder == "hermes":
        return list(
            lib.convert_to_function_call([{c["name"]: c["arguments"]} for c in _hermes_calls(result)])
        )
    _check_expressions(result)
    return list(lib.decode_execute_prompting(result, False))


def _hermes_calls(result: Any) -> list[dict[str, Any]]:
    calls = []
    for match in _HERMES.findall(result):
        try:
            calls.append(json.loads(match))
        except Exception:  # the handler skips a block it cannot read
            continue
    if any(type(call) is not dict for call in calls):
        raise ValueError(f"Model did not return a list of function calls: {result}")
    return calls


def call_of(source: str) -> tuple[str, dict[str, Any]]:
    """A decoded call string (`cd(folder='tmp')`) as a name and keyword arguments.

    bfcl-eval `eval`s the string; its decoders write every argument as a Python literal, so
    reading them as literals gives the same values. A string that is not a plain call with
    literal arguments (a nested call, a name) is returned whole as the name: arborl's
    backends then answer that no such function exists, and nothing runs."""
    try:
        node = ast.parse(source, mode="eval").body
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args:
            return node.func.id, {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        pass
    return source, {}


def _check_expressions(text: Any) -> None:
    """Refuse a reply whose arithmetic expressions bfcl-eval's parser would `eval` when they
    hold anything but bounded number and string constants. Parses as its parser does."""
    if not isinstance(text, str):
        return  # the decoder fails on it as it is
    text = text.strip("`\n ")
    text = ("" if text.startswith("[") else "[") + text + ("" if text.endswith("]") else "]")
    try:
        tree = ast.parse(text.strip().strip("'"), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return  # bfcl-eval's parser fails the same way
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and not _constant_arithmetic(node):
            raise UnsafeExpression(
                f"not evaluated: {ast.unparse(node)[:200]!r} is an expression of more than constants "
                "(bfcl-eval's parser would eval it; arborl runs no model-written code)"
            )


def _constant_arithmetic(node: ast.BinOp) -> bool:
    nodes = list(ast.walk(node))
    if len(nodes) > _MAX_NODES:
        return False
    for n in nodes:
        if isinstance(n, ast.BinOp):
            if not isinstance(n.op, _SAFE_OPS):
                return False
            strings = any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in (n.left, n.right))
            if strings and not isinstance(n.op, ast.Add):
                return False  # 'a' * 10**12
            if isinstance(n.op, ast.Pow) and not _small_exponent(n):
                return False
        elif isinstance(n, ast.UnaryOp):
            if not isinstance(n.op, ast.UAdd | ast.USub):
                return False
        elif isinstance(n, ast.Constant):
            ok_number = isinstance(n.value, int | float) and abs(n.value) <= _MAX_CONSTANT
            if not (ok_number or (isinstance(n.value, str) and len(n.value) <= 10_000)):
                return False
        elif not isinstance(n, ast.operator | ast.unaryop):
            return False
    return True


def _small_exponent(node: ast.BinOp) -> bool:
    exponent = node.right
    if not (isinstance(exponent, ast.Constant) and isinstance(exponent.value, int | float)):
        return False
    return abs(exponent.value) <= _MAX_EXPONENT and not any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) for n in ast.walk(node.left)
    )
