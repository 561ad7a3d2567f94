"""Tools: schemas from signatures, argument checking, and failures as readable results."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Literal

import pytest
from pydantic import Field

from arborl.envs.parsers import ToolCall
from arborl.envs.toolbox import MAX_RESULT_CHARS, Tool, ToolBox, ToolResult, function_tool, head_tail


@function_tool
def add(a: int, b: int = 2) -> int:
    """Add two integers."""
    return a + b


@function_tool(name="shout")
async def loud(text: str) -> str:
    """Upper-case the text."""
    await asyncio.sleep(0)
    return text.upper()


@function_tool
def explode() -> str:
    """Always fails."""
    raise RuntimeError("kaboom")


@function_tool
def huge() -> str:
    return "x" * 1_000_000


BOX = ToolBox([add, loud, explode, huge])


def test_schema_comes_from_the_signature():
    schema = add.schema()
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == "add" and fn["description"] == "Add two integers."
    assert fn["parameters"]["properties"] == {
        "a": {"type": "integer"},
        "b": {"type": "integer", "default": 2},
    }
    assert fn["parameters"]["required"] == ["a"]
    assert fn["parameters"]["additionalProperties"] is False
    assert loud.name == "shout"
    # fresh copies: a caller mutating them changes nothing
    BOX.schemas()[0]["function"]["parameters"]["properties"].clear()
    assert BOX.schemas()[0]["function"]["parameters"]["properties"]


async def test_calls_run_sync_and_async_functions():
    assert (await BOX.run(ToolCall("add", {"a": 1}))).content == "3"
    result = await BOX.run(ToolCall("shout", {"text": "hi"}))
    assert result.ok and result.content == "HI" and result.duration_s >= 0


@pytest.mark.parametrize(
    ("call", "kind", "words"),
    [
        (ToolCall("nope", {}), "unknown_tool", ["unknown tool `nope`", "add, shout"]),
        (ToolCall("add", {"a": "one"}), "invalid_arguments", ["`a`", "not of type 'integer'"]),
        (ToolCall("add", {}), "invalid_arguments", ["'a' is a required property"]),
        (ToolCall("add", {"a": 1, "c": 3}), "invalid_arguments", ["Additional properties", "'c'"]),
        (ToolCall("explode", {}), "tool_error", ["`explode` failed", "RuntimeError: kaboom"]),
    ],
)
async def test_bad_calls_become_error_results(call, kind, words):
    result = await BOX.run(call)
    assert not result.ok and result.error == kind
    for w in words:
        assert w in result.content


async def test_deeply_nested_arguments_are_refused_not_crashing():
    deep: object = 1
    for _ in range(5000):
        deep = [deep]
    result = await BOX.run(ToolCall("add", {"a": deep}))
    assert not result.ok and result.error == "invalid_arguments"


async def test_long_results_keep_head_and_tail():
    result = await BOX.run(ToolCall("huge", {}))
    assert len(result.content) < MAX_RESULT_CHARS + 100
    assert "characters truncated" in result.content
    text = "HEAD" + "." * 100 + "TAIL"
    cut = head_tail(text, 20)
    assert cut.startswith("HEAD") and cut.endswith("TAIL") and "truncated" in cut


def test_bad_schemas_and_duplicate_names_are_refused():
    with pytest.raises(ValueError, match="invalid parameters schema"):
        Tool("bad", "", {"type": "no-such-type"}, lambda: "x")
    with pytest.raises(ValueError, match="two tools are named"):
        ToolBox([add, add])


async def test_tools_may_return_results_and_data():
    box = ToolBox(
        [
            Tool("t", "", {"type": "object"}, lambda: ToolResult("done", terminal=True, reward=1.0)),
            Tool("d", "", {"type": "object"}, lambda: {"k": [1, 2]}),
        ]
    )
    t = await box.run(ToolCall("t", {}))
    assert t.terminal and t.reward == 1.0
    assert (await box.run(ToolCall("d", {}))).content == '{"k": [1, 2]}'


def test_annotated_bounds_and_optional_arguments_read_as_people_write_them():
    @function_tool
    def view(
        path: Annotated[str, Field(description="a file")],
        lines: Annotated[
            list[int] | None, Field(min_length=2, max_length=2, description="first, last")
        ] = None,
        mode: Literal["a", "b"] = "a",
    ) -> str:
        """View a file."""
        return path

    params = view.schema()["function"]["parameters"]
    assert json.dumps(params) == json.dumps(
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "a file"},
                # optional, not nullable: the model leaves it out rather than sending null
                "lines": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "minItems": 2,
                    "maxItems": 2,
                    "description": "first, last",
                },
                "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
            },
            "required": ["path"],
            "additionalProperties": False,
        }
    )
