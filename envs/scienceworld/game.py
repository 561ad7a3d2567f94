"""One simulator step, as the package's `ScienceWorldEnv.step` takes it.

The package's `step` reads, every step, the room (`look`), the inventory, the task
description and every valid action-object combination into its `info`. Each step here makes
the same calls in the same order (`simulator.reads_after_step`): listing the valid
combinations moves the world's later random events, so a step without it plays another world
than the package's (grow-fruit train 6's gold path fails in it). What crosses the bridge
is only what the env uses: the valid combinations stay in the JVM unless they are shown. The
package's arithmetic: the score is `round(100 * getScore())`, a score below 0 ends the episode
(the package sets `isCompleted`), and so does a move count over the step limit (here a
truncation, apart from the game's own end). tests/envs/scienceworld checks every step against
the package's `step`.

Every call goes to the JVM over Py4J; a JVM that died or raised is `JVMDied`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from arborl.tasks.scienceworld import simulator
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


def load(game: Any, task: ScienceWorldTask) -> None:
    """Load `task` in `game`: a fresh world, before the package's first move (`start` takes it)."""

    def run() -> None:
        game.load(task.task_name, task.variation, task.simplifications)
        game.server.reset()

    call(game, run)


def task_description(game: Any) -> str:
    return str(call(game, game.taskdescription))


def valid_actions(game: Any) -> list[str]:
    """The valid action-object combinations, as the package's `step` lists them (`info['valid']`),
    in its order. Listing them moves the world's later random events (`simulator.
    reads_after_step`): a step lists them once, and this lists them again."""
    return call(game, lambda: _as_list(game, game.server.getValidActionObjectCombinations()))


def _as_list(game: Any, found: Any) -> list[str]:
    """The JVM's list of valid combinations in Python. The JVM joins them into one string, so
    they cross the bridge once, not once an action (the package's list form) nor with every
    action's template and object ids (its JSON form, whose order also differs)."""
    joined = str(game._gateway.jvm.java.lang.String.join("\n", found))
    actions = joined.split("\n") if joined else []
    if len(actions) != found.size():  # an action with a newline in it: no join can be split
        actions = [str(a) for a in found]
    return actions


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
    """One step as the package takes it (the action, then its reads), in one trip to the JVM's
    worker thread; the valid actions copied over only when `with_valid`."""

    def run() -> Reading:
        server = game.server
        observation = str(server.step(action))
        score = round(100 * float(server.getScore()))
        completed = bool(server.getCompleted()) or score < 0
        now = GameStep(observation, score, completed, int(server.getNumMoves()))
        room, inventory, found = simulator.reads_after_step(server)
        return Reading(now, room, inventory, tuple(_as_list(game, found)) if with_valid else None)

    return call(game, run)


def start(game: Any, task: ScienceWorldTask, with_valid: bool) -> tuple[Reading, str, list[str]]:
    """`load`, the package's first move (`look around`, as its `reset` takes it), then the task
    description and the action templates."""
    load(game, task)
    return act(game, "look around", with_valid), task_description(game), action_templates(game)
