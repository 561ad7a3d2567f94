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


#: The simulator's answer to an action it cannot carry out (`envs/scienceworld` passes it on as is).
NO_MATCH = "No known action matches that input."
#: Ticks the replay waits, at most, for one action the env's world is not ready for.
PATIENCE = 10


def gold_policy(task: ScienceWorldTask) -> Any:
    """Replays the gold action sequence, one action per turn.

    The path is drawn in the policy's own JVM, and random events (a bee pollinating a flower,
    a plant reaching its next stage) come from each JVM's own random state, which every load
    before moves. So the env's world can run a few ticks behind the world the path was drawn
    in: `focus on apple` arrives before any apple has grown, the game answers `NO_MATCH`, and a
    plain replay never completes (grow-fruit train variations 4 and 22 in a whole-split run;
    each passes when replayed again). So an action the game does not match is tried again
    after a `wait1`, up to `PATIENCE` times, then left behind. A path whose world keeps pace
    gets no wait: the replay is the package's sequence as it is.
    """
    replies: list[str] = []
    started = False
    sent: str | None = None  # the gold action of the last turn (None after a wait)
    waited = 0

    async def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        nonlocal started, sent, waited
        if not started:
            replies.extend(reversed(await asyncio.to_thread(gold_actions, task)))
            started = True
        answer = messages[-1].get("content") if messages and messages[-1].get("role") != "assistant" else None
        if sent is not None and str(answer).startswith(NO_MATCH) and waited < PATIENCE:
            replies.append(sent)
            sent, waited = None, waited + 1
            return "wait1"
        if sent is not None:
            waited = 0
        sent = replies.pop() if replies else None
        return sent if sent is not None else "look around"

    return policy


def empty_policy(task: ScienceWorldTask) -> Any:
    """Does nothing: an empty reply every turn (the game answers it; no task is solved)."""
    return lambda messages, info: ""
