"""Answer verifiers for tool tasks: pure functions `(answer, task) -> reward in [0, 1]`.

Built-in: `exact` (normalised string match), `numeric` (the last number in the answer,
relative tolerance `task.tolerance`), `contains` (the expected answer occurs in it). A task
may instead name a user function `"package.module:function"`; it may return a bool or a
float. Register more with `@register_verifier("name")`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from arborl.tasks import ToolTask
from arborl.tasks.common import load_entry_point

Verifier = Callable[[str, ToolTask], float | bool]
VERIFIERS: dict[str, Verifier] = {}
_NUMBER = re.compile(
    r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+(?:[eE][-+]?\d+)?"
)
#: The numeric verifier reads the answer's last this-many characters (answers are short).
NUMERIC_WINDOW = 4096


def register_verifier(name: str) -> Callable[[Verifier], Verifier]:
    def deco(fn: Verifier) -> Verifier:
        VERIFIERS[name] = fn
        return fn

    return deco


def normalise(text: str) -> str:
    text = " ".join(str(text).split()).casefold()
    return text.strip().strip("\"'`").rstrip(".").strip()


def last_number(text: str) -> float | None:
    """The last number written in `text` (commas as thousands separators allowed)."""
    if len(text) > NUMERIC_WINDOW:
        tail = text[-NUMERIC_WINDOW:]
        text = tail[next((i for i, c in enumerate(tail) if not c.isdigit()), 0) :]
    last = None
    for last in _NUMBER.finditer(text):  # noqa: B007 - only the last match is wanted
        pass
    return float(last.group(0).replace(",", "")) if last else None


@register_verifier("exact")
def exact(answer: str, task: ToolTask) -> float:
    return float(task.answer is not None and normalise(answer) == normalise(str(task.answer)))


@register_verifier("contains")
def contains(answer: str, task: ToolTask) -> float:
    return float(task.answer is not None and normalise(str(task.answer)) in normalise(answer))


@register_verifier("numeric")
def numeric(answer: str, task: ToolTask) -> float:
    if task.answer is None:
        return 0.0
    expected = float(task.answer) if not isinstance(task.answer, str) else last_number(task.answer)
    got = last_number(answer)
    if expected is None or got is None or not math.isfinite(got):
        return 0.0
    return float(math.isclose(got, expected, rel_tol=task.tolerance, abs_tol=1e-12))


def get_verifier(name: str) -> Verifier:
    """A registered verifier, or a `"module:function"` imported on first use."""
    if name in VERIFIERS:
        return VERIFIERS[name]
    if ":" in name:
        fn: Any = load_entry_point(name)
        VERIFIERS[name] = fn
        return fn
    raise ValueError(
        f"unknown verifier {name!r}; built-in: {sorted(VERIFIERS)}, or 'package.module:function'"
    )


def score(answer: str, task: ToolTask) -> float:
    """The task's verifier applied to `answer`, as a float in [0, 1]."""
    value = get_verifier(task.verifier)(answer, task)
    return max(0.0, min(1.0, float(value)))
