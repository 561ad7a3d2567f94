"""A possible answer's value as the Java/JavaScript source string a model writes for it.

BFCL's Java and JavaScript possible answers hold converted values (`true`, `[101, 202]`,
`{"limit": 50}`), while a model answers in source text (`"true"`, `"new ArrayList<>(
Arrays.asList(101, 202))"`), which bfcl-eval's checker converts back by the parameter's
declared type (its `java_type_converter` / `js_type_converter`). The gold policy needs the
inverse of those converters; bfcl-eval has none, so it is written here, following the forms
the converters parse. The gold policy checks each result with bfcl-eval's checker.
"""

from __future__ import annotations

import json
from typing import Any

_JAVA_BOXED = {
    "byte": "Byte",
    "short": "Short",
    "integer": "Integer",
    "long": "Long",
    "float": "Float",
    "double": "Double",
    "boolean": "Boolean",
    "char": "Character",
    "String": "String",
}


def to_source(value: Any, doc: dict[str, Any], language: str) -> Any:
    """`value` written as the source string of the parameter `doc` (its raw, typed doc). A
    string is taken as written: the converters pass text they cannot parse through as a
    string (a variable name where a map or list is declared)."""
    if isinstance(value, str):
        return value
    if language == "JAVA":
        return _java(value, doc["type"], (doc.get("items") or {}).get("type"))
    if language == "JAVASCRIPT":
        return _js(value, doc["type"], (doc.get("items") or {}).get("type"))
    return value


def _java(value: Any, kind: str, item: str | None) -> str:
    if kind == "Array":
        elements = ", ".join(_java_scalar(v, item or "") for v in value)
        return f"new {_java_array_type(item)}[]{{{elements}}}"
    if kind == "ArrayList":
        # the ArrayList parser strips one character each side of String and char elements
        elements = ", ".join(
            json.dumps(v) if item in ("String", "char") else _java_scalar(v, item or "") for v in value
        )
        return f"new ArrayList<>(Arrays.asList({elements}))" if value else "new ArrayList<>()"
    if kind == "HashMap":
        puts = " ".join(f"put({json.dumps(k)}, {_java_literal(v)});" for k, v in value.items())
        return f"new HashMap<>() {{{{ {puts} }}}}"
    return _java_scalar(value, kind)


def _java_array_type(item: str | None) -> str:
    if item in ("byte", "short", "long", "float", "double", "boolean", "char"):
        return item
    return "int" if item == "integer" else _JAVA_BOXED.get(item or "", "Object")


def _java_scalar(value: Any, kind: str) -> str:
    """Scalars by their declared type; String, char and any are taken as written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if kind == "long":
        return f"{value}L"
    if kind == "float":
        return f"{value}f"
    return str(value)


def _java_literal(value: Any) -> str:
    """A HashMap value: its parser reads the literal without a declared type."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def _js(value: Any, kind: str, item: str | None) -> str:
    if kind == "array":
        return "[" + ", ".join(_js_literal(v) for v in value) + "]"
    if kind == "dict":
        return "{" + ", ".join(f"{k}: {_js_literal(v)}" for k, v in value.items()) + "}"
    if kind == "Bigint":
        return f"{value}n"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _js_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_js_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_js_literal(v)}" for k, v in value.items()) + "}"
    return str(value)
