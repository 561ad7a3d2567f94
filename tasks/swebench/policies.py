"""SWE-bench's scripted policies, for any suite of SWE-bench instances: the gold one applies
the instance's gold patch with the code env's `bash` tool, runs the tests and submits; the
empty one submits the repository unchanged."""

from __future__ import annotations

import json
from typing import Any

from ..common import Policy
from ..task_types import CodeTask
from .convert import apply_command, swe_parts


def _call(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def gold_policy(task: CodeTask) -> Policy:
    """Apply the gold patch with `bash`, run the tests, submit."""
    parts = swe_parts(task)
    if parts is None:
        raise ValueError(f"task {task.id} is not a SWE-bench task (no instance in its metadata)")
    replies = [
        _call("bash", {"command": apply_command(parts[0].patch)}),
        _call("run_tests", {}),
        _call("submit", {}),
    ]

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        turn = sum(m.get("role") == "assistant" for m in messages)
        return replies[min(turn, len(replies) - 1)]

    return policy


def empty_policy(task: CodeTask) -> Policy:
    """Submit the repository unchanged."""
    return lambda messages, info: _call("submit", {})
