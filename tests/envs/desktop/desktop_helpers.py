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


def open_notes_in_mousepad() -> list[dict[str, Any]]:
    """Config steps: write ~/notes.txt ("first line") and open it (mousepad)."""
    return [
        {"type": "execute", "parameters": {"command": "printf 'first line\\n' > ~/notes.txt", "shell": True}},
        {"type": "open", "parameters": {"path": "/home/agent/notes.txt"}},
    ]


def d1acdb87_rules(sheet_idx0: int | str, sheet_idx1: int | str) -> list[dict[str, Any]]:
    """OSWorld's d1acdb87 (fill in a restaurant sheet) compare_table rules: names and websites
    exact, addresses fuzzy with Rd/St normalised, the gold's phone digits inside the result's."""
    return [
        {
            "type": "sheet_fuzzy",
            "sheet_idx0": sheet_idx0,
            "sheet_idx1": sheet_idx1,
            "rules": [
                {"range": ["A1:A6", "D1:D6"], "type": "exact_match"},
                {
                    "range": ["B1:B6"],
                    "type": "fuzzy_match",
                    "threshold": 85,
                    "normalization": [["Rd", "Road"], ["St", "Street"]],
                    "ignore_case": True,
                },
                {"range": ["C1:C6"], "type": "includes", "trim_leadings": "+ ", "ignore_chars": " ()-"},
            ],
        }
    ]
