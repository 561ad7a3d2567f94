"""The gold and empty policies of the ScienceWorld suites.

Gold replays the package's own gold action sequence: the simulator writes it when a task is
loaded with `generateGoldPath=True` (`ScienceWorldEnv.get_gold_action_sequence`). That takes
a JVM, so this module keeps JVMs of its own (started on first use, one for each draw under way
at once, shared by every gold policy of the process) rather than the env's: a policy must not
reach into the env it is playing, and the env's JVMs never compute gold paths for an agent to
find.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import simulator
from .task import ScienceWorldTask

_lock = threading.Lock()  # guards everything below
_idle: list[Any] = []  # gold JVMs not in use
_started: list[Any] = []  # every gold JVM, closed at exit
_cache: dict[tuple[str, int, str], tuple[str, ...]] = {}
_drawing: dict[tuple[str, int, str], threading.Lock] = {}  # one draw of a task at a time


class GoldPathError(RuntimeError):
    """The simulator gave no gold action sequence for a task (the message has its reply)."""


def gold_actions(task: ScienceWorldTask) -> tuple[str, ...]:
    """The package's gold action sequence of `task` (cached; the first call starts a JVM).

    One draw is the path: a world depends on its task and variation alone (`simulator`), so
    the package draws the same path at every load, in any JVM, and the env's world plays it
    out as the world it was drawn in. (Before that, draws differed between loads and a path
    drawn in one JVM could fail in another's world: docs/benchmarks.md, ScienceWorld.)
    """
    key = (task.task_name, task.variation, task.simplifications)
    with _lock:
        if key in _cache:
            return _cache[key]
        drawing = _drawing.setdefault(key, threading.Lock())
    with drawing:  # the samples of one task share a path and wait for its draw
        with _lock:
            if key in _cache:
                return _cache[key]
        with _gold_game() as game:
            game.load(task.task_name, task.variation, task.simplifications, generateGoldPath=True)
            actions = tuple(str(a) for a in game.get_gold_action_sequence())
        if not actions or actions[0].startswith("ERROR"):
            raise GoldPathError(f"no gold path for {task.id}: {actions[:1]}")
        with _lock:
            _cache[key] = actions
        return actions


@contextmanager
def _gold_game() -> Iterator[Any]:
    """A gold JVM of this process to itself: an idle one, or a new one (as many as draw at once)."""
    with _lock:
        game = _idle.pop() if _idle else None
    if game is None:
        game = simulator.start()
        with _lock:
            if not _started:
                atexit.register(_close)
            _started.append(game)
    try:
        yield game
    except BaseException:
        # a JVM that failed a draw may be dead, and would fail every draw that takes it after:
        # drop it, the next draw starts a new one
        with _lock:
            if game in _started:  # not if `_close` ran meanwhile
                _started.remove(game)
        simulator.stop(game)
        raise
    with _lock:
        _idle.append(game)


def _close() -> None:
    with _lock:
        games = list(_started)
        _started.clear()
        _idle.clear()
    for game in games:
        simulator.stop(game)


def gold_policy(task: ScienceWorldTask) -> Any:
    """Replays the gold action sequence as it is, one action per turn, as the package's own
    replay does (an action of the path the game does not match there, such as an answer `0` to
    a question the game did not ask, is passed over the same way); `look around` after it."""
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
