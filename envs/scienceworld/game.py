"""One simulator step, as the package's `ScienceWorldEnv.step` takes it, minus the extras.

The package's `step` also reads, every step, the room (`look`), the inventory, the task
description and every valid action-object combination into its `info`; the last costs the
simulator a search of the world each step. This module reads only what the score and the end
of the episode need, and the rest when it is asked for, with the package's own arithmetic:
the score is `round(100 * getScore())`, a score below 0 ends the episode (the package sets
`isCompleted`), and so does a move count over the step limit (here a truncation, apart from
the game's own end). tests/envs/scienceworld checks it against the package's `step`.

Every call goes to the JVM over Py4J; a JVM that died or raised is `JVMDied`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from arborl.tasks.scienceworld.task import ScienceWorldTask

from .jvm import JVMDied, is_alive

T = TypeVar("T")


@dataclass(frozen=True)
class GameStep:
    observation: str
    score: int
    """The game's score, 0-100 (below 0: the task failed)."""
    completed: bool
    """The game ended the task: solved, or failed (score below 0)."""
    moves: int


def call(game: Any, fn: Callable[[], T]) -> T:
    """`fn()` against the JVM; any failure of the JVM or the bridge is `JVMDied`."""
    try:
        return fn()
    except Exception as e:
        state = "exited" if not is_alive(game) else "raised"
        raise JVMDied(f"the ScienceWorld JVM {state}: {type(e).__name__}: {str(e)[:300]}") from e


def load(game: Any, task: ScienceWorldTask) -> GameStep:
    """Load `task` in `game` (a fresh world) and take the package's first move, `look around`."""

    def run() -> None:
        game.load(task.task_name, task.variation, task.simplifications)
        game.server.reset()

    call(game, run)
    return step(game, "look around")


def step(game: Any, action: str) -> GameStep:
    def run() -> GameStep:
        server = game.server
        observation = str(server.step(action))
        score = round(100 * float(server.getScore()))
        completed = bool(server.getCompleted()) or score < 0
        return GameStep(observation, score, completed, int(server.getNumMoves()))

    return call(game, run)


def look(game: Any) -> str:
    return str(call(game, game.look))


def inventory(game: Any) -> str:
    return str(call(game, game.inventory))


def task_description(game: Any) -> str:
    return str(call(game, game.taskdescription))


def valid_actions(game: Any) -> list[str]:
    """The valid action-object combinations, as the package's `step` lists them (`info['valid']`),
    in its order. The JVM joins them into one string, so they cross the bridge once, not once
    an action (the package's list form) nor with every action's template and object ids (its
    JSON form, whose order also differs)."""

    def run() -> list[str]:
        found = game.server.getValidActionObjectCombinations()
        joined = str(game._gateway.jvm.java.lang.String.join("\n", found))
        actions = joined.split("\n") if joined else []
        if len(actions) != found.size():  # an action with a newline in it: no join can be split
            actions = [str(a) for a in found]
        return actions

    return call(game, run)


def action_templates(game: Any) -> list[str]:
    return [str(a) for a in call(game, game.get_possible_actions)]


@dataclass(frozen=True)
class Reading:
    """A step and what the env reads after it, in one trip to a worker thread."""

    step: GameStep
    room: str
    """`look` (a free action: no move), for the state hash."""
    inventory: str
    valid: tuple[str, ...] | None
    """The valid actions, when asked for."""


def act(game: Any, action: str, with_valid: bool) -> Reading:
    """`step`, then the room, the inventory and (if asked) the valid actions."""
    now = step(game, action)
    return Reading(now, look(game), inventory(game), tuple(valid_actions(game)) if with_valid else None)


def start(game: Any, task: ScienceWorldTask, with_valid: bool) -> tuple[Reading, str, list[str]]:
    """`load`, then the first reading, the task description and the action templates."""
    first = load(game, task)
    valid = tuple(valid_actions(game)) if with_valid else None
    reading = Reading(first, look(game), inventory(game), valid)
    return reading, task_description(game), action_templates(game)
