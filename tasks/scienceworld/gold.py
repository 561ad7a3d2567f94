"""The gold and empty policies of the ScienceWorld suites.

Gold replays the package's own gold action sequence: the simulator writes it when a task is
loaded with `generateGoldPath=True` (`ScienceWorldEnv.get_gold_action_sequence`). That takes
a JVM, so this module keeps one of its own (started on first use, shared by every gold policy
of the process, behind a lock) rather than the env's: a policy must not reach into the env it
is playing, and the env's JVMs never compute gold paths for an agent to find.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from typing import Any

from .task import ScienceWorldTask

_lock = threading.Lock()
_game: Any = None
_cache: dict[tuple[str, int, str], tuple[str, ...]] = {}


class GoldPathError(RuntimeError):
    """The simulator gave no gold action sequence for a task (the message has its reply)."""


def gold_actions(task: ScienceWorldTask) -> tuple[str, ...]:
    """The package's gold action sequence of `task` (cached; the first call starts a JVM)."""
    key = (task.task_name, task.variation, task.simplifications)
    with _lock:
        if key not in _cache:
            game = _gold_game()
            game.load(task.task_name, task.variation, task.simplifications, generateGoldPath=True)
            actions = tuple(str(a) for a in game.get_gold_action_sequence())
            if not actions or actions[0].startswith("ERROR"):
                raise GoldPathError(f"no gold path for {task.id}: {actions[:1]}")
            _cache[key] = actions
        return _cache[key]


def _gold_game() -> Any:
    global _game
    if _game is None:
        from scienceworld import ScienceWorldEnv

        _game = ScienceWorldEnv("")
        atexit.register(_close)
    return _game


def _close() -> None:
    global _game
    if _game is not None:
        game, _game = _game, None
        game.close()
        game.close = lambda: None  # the package's __del__ would close it again, which raises


def gold_policy(task: ScienceWorldTask) -> Any:
    """Replays the gold action sequence, one action per turn."""
    replies: list[str] = []
    started = False

    async def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        nonlocal started
        if not started:
            replies.extend(reversed(await asyncio.to_thread(gold_actions, task)))
            started = True
        return replies.pop() if replies else "look around"

    return policy


def empty_policy(task: ScienceWorldTask) -> Any:
    """Does nothing: an empty reply every turn (the game answers it; no task is solved)."""
    return lambda messages, info: ""
