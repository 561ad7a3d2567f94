"""The game's tasks and its scripted policies (what `arborl eval agent=gold|empty` runs)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field

from arborl.tasks import Task

NUMBER = re.compile(r"-?\d+")


class GuessTask(Task):
    """A secret number from 1 to `high`, found in at most `max_guesses` guesses."""

    secret: int = Field(ge=1)
    high: int = Field(100, ge=1)
    max_guesses: int = Field(7, ge=1)


def last_number(text: str) -> int | None:
    """The guess in a reply: its last whole number ("I'll say 50" → 50), None if it has none."""
    found = NUMBER.findall(text)
    return int(found[-1]) if found else None


def guess_mini() -> list[GuessTask]:
    """Both ends of the range and two numbers in between: bisection needs all 7 guesses for 100."""
    return [GuessTask(id=f"guess-mini/{n:03d}", secret=n) for n in (1, 37, 64, 100)]


def bisecting_policy(task: GuessTask) -> Any:
    """Bisect the range, reading the env's "higher" / "lower" answers from the chat (the gold
    policy: it never reads the secret)."""

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        low, high, guess = 1, task.high, None
        for message in messages:
            if message["role"] == "assistant":
                guess = last_number(message["content"])
            elif guess is not None and message["content"].startswith("Higher"):
                low = guess + 1
            elif guess is not None and message["content"].startswith("Lower"):
                high = guess - 1
        return f"My guess is {(low + high) // 2}."

    return policy


def giving_up_policy(task: GuessTask) -> Any:
    """Replies with no number, which gives the game up (the empty policy: it must score 0)."""
    return lambda messages, info: "I give up."
