"""Small helpers for the desktop tests: replies and OSWorld task dicts."""

from __future__ import annotations

from typing import Any


def code(*lines: str) -> str:
    """A model reply holding `lines` in a python code block."""
    return "```python\n" + "\n".join(lines) + "\n```"


def task(
    instruction: str = "test", config: list[Any] | None = None, evaluator: Any = None, **kw: Any
) -> dict:
    """An OSWorld task dict; the default evaluator checks that ~/out.txt holds 'ok'."""
    return {
        "id": kw.pop("id", "test/desktop"),
        "instruction": instruction,
        "config": config or [],
        "evaluator": evaluator
        or {
            "func": "check_include_exclude",
            "result": {"type": "vm_command_line", "command": "cat ~/out.txt", "shell": True},
            "expected": {"type": "rule", "rules": {"include": ["ok"]}},
        },
        **kw,
    }


def xterm() -> dict[str, Any]:
    return {"type": "launch", "parameters": {"command": ["xterm"]}}
