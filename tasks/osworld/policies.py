"""Scripted policies for OSWorld-format tasks: a gold script replayed, and giving up."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..task_types import Task


class ScriptedDesktopPolicy:
    """Replays a gold script: pyautogui action strings, plus two steps that read the screen.

    - ``{"wait_window": REGEX}``: reply WAIT until a window whose title matches is listed in
      ``info["windows"]`` (at most `max_waits` times), then go on.
    - ``{"click_in": [REGEX, dx, dy], "clicks": n}``: click (n times, default once) at (dx, dy)
      inside that window's client area.
    A policy is ``(messages, info) -> reply``; after the script it replies DONE.
    """

    def __init__(self, steps: Sequence[Any], max_waits: int = 30) -> None:
        self.steps = list(steps)
        self.max_waits = max_waits
        self._i = 0
        self._waits = 0

    def __call__(self, messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        windows = info.get("windows") or []
        while self._i < len(self.steps):
            step = self.steps[self._i]
            if isinstance(step, str):
                self._i += 1
                return step
            if "wait_window" in step:
                found = any(re.search(step["wait_window"], w.get("title", "")) for w in windows)
                if not found and self._waits < self.max_waits:
                    self._waits += 1
                    return "WAIT"
                self._i, self._waits = self._i + 1, 0
                continue
            if "click_in" in step:
                pattern, dx, dy = step["click_in"]
                self._i += 1
                for w in windows:
                    if re.search(pattern, w.get("title", "")):
                        return (
                            f"pyautogui.click({w['x'] + dx}, {w['y'] + dy}, clicks={step.get('clicks', 1)})"
                        )
                return "FAIL"  # the window the script needs is not there
            raise ValueError(f"unknown gold step {step!r}")
        return "DONE"


def gold_steps(gold_file: Path, task_id: str) -> list[Any]:
    """The scripted steps of `task_id` in a `gold.json` (task id → steps); KeyError names both."""
    gold = json.loads(gold_file.read_text(encoding="utf-8"))
    if task_id not in gold:
        raise KeyError(f"{gold_file} has no scripted solution for {task_id!r}")
    return list(gold[task_id])


def empty_policy(task: Task) -> Any:
    """Gives up at once: claims to be done without touching anything (must score 0)."""
    return lambda messages, info: "DONE"
