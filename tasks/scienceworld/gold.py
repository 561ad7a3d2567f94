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

#: Gold paths drawn, at most, for one task: a draw the policy's own replay does not complete is
#: drawn again (`gold_actions`).
DRAWS = 3
#: The simulator's answer to an action it cannot carry out (`envs/scienceworld` passes it on as is).
NO_MATCH = "No known action matches that input."
#: Ticks the replay waits, at most, for one action the env's world is not ready for.
PATIENCE = 10

_lock = threading.Lock()  # guards everything below
_idle: list[Any] = []  # gold JVMs not in use
_started: list[Any] = []  # every gold JVM, closed at exit
_cache: dict[tuple[str, int, str], tuple[str, ...]] = {}
_drawing: dict[tuple[str, int, str], threading.Lock] = {}  # one draw of a task at a time


class GoldPathError(RuntimeError):
    """The simulator gave no gold action sequence for a task (the message has its reply)."""


def gold_actions(task: ScienceWorldTask) -> tuple[str, ...]:
    """The package's gold action sequence of `task` (cached; the first call starts a JVM).

    The simulator draws a new path at each load, and some draws are wrong: in a whole-split run
    mendelian-genetics-known-plant train variations 41 and 43 drew paths of 260-300 actions
    that focus on the wrong box (score -100), where draws in a fresh JVM took 145-147 actions
    and score 100. So a draw is replayed in the policy's own JVM (`_completes`, in a fresh
    world, as `gold_policy` replays it) and drawn again, up to `DRAWS` times, when it does not
    finish the task with the full score within the task's step limit; the last draw is played
    either way, and the env scores it. A path the package gets wrong at every draw (`freeze`
    11: the chocolate never freezes) still scores what it scores.
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
            for _ in range(DRAWS):
                game.load(task.task_name, task.variation, task.simplifications, generateGoldPath=True)
                actions = tuple(str(a) for a in game.get_gold_action_sequence())
                if not actions or actions[0].startswith("ERROR"):
                    raise GoldPathError(f"no gold path for {task.id}: {actions[:1]}")
                if _completes(game, task, actions):
                    break
        with _lock:
            _cache[key] = actions
        return actions


def _completes(game: Any, task: ScienceWorldTask, actions: tuple[str, ...]) -> bool:
    """Whether `actions`, replayed as `gold_policy` replays them in a fresh world of `game`,
    finish `task` with the full score before the moves pass its step limit."""
    server = game.server
    game.load(task.task_name, task.variation, task.simplifications)
    server.reset()
    pending, waited = list(reversed(actions)), 0
    while pending and not server.getCompleted() and int(server.getNumMoves()) <= task.step_limit:
        if str(server.step(pending[-1])).startswith(NO_MATCH) and waited < PATIENCE:
            server.step("wait1")
            waited += 1
            continue
        pending.pop()
        waited = 0
    score = round(100 * float(server.getScore()))
    return bool(server.getCompleted()) and score == 100 and int(server.getNumMoves()) <= task.step_limit


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
    finally:
        with _lock:
            _idle.append(game)


def _close() -> None:
    with _lock:
        games = list(_started)
        _started.clear()
        _idle.clear()
    for game in games:
        game.close()
        game.close = lambda: None  # the package's __del__ would close it again, which raises


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
