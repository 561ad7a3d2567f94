"""Scripted policies of the TextWorld suites: the game's own walkthrough, and doing nothing."""

from __future__ import annotations

from typing import Any

from ..common import Policy
from .games import TextWorldTask, game_metadata

#: What the gold policy says once the walkthrough is played (the game has ended by then).
IDLE = "look"


def walkthrough(task: TextWorldTask) -> list[str]:
    """The game's walkthrough, as TextWorld's generator recorded it."""
    steps = game_metadata(task).get("walkthrough")
    if not steps:
        raise ValueError(f"{task.id}: the game has no walkthrough (games from tw-make challenges do)")
    return [str(s) for s in steps]


def gold_policy(task: TextWorldTask) -> Policy:
    """Plays the walkthrough, one command a turn."""
    steps = walkthrough(task)

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        turn = sum(m.get("role") == "assistant" for m in messages)
        return steps[turn] if turn < len(steps) else IDLE

    return policy


def empty_policy(task: TextWorldTask) -> Policy:
    """Looks around every turn and never scores."""
    return lambda messages, info: IDLE
