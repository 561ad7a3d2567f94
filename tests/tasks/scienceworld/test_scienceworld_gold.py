"""The gold policy's choice among the package's draws, on a simulator stand-in (no JVM).

The package draws a new gold path at each load and some draws are wrong (a whole-split run
drew mendelian-genetics-known-plant train 41 a path of 297 actions that focuses on the wrong
box, where fresh draws took 147 and scored 100). Such a draw cannot be made on demand in the
real simulator, so the stand-in here plays the part: it hands out the draws it is given and
scores them by ScienceWorld's rules (focusing on the wrong thing fails the task, -100; a
`wait1` is two moves; an action the world is not ready for gets the package's no-match
answer)."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from arborl.tasks.scienceworld import gold
from arborl.tasks.scienceworld.task import make_task

RIGHT = ("go to greenhouse", "focus on blue box")
WRONG = ("go to greenhouse", "focus on orange box")


class StandIn:
    """`ScienceWorldEnv` and its server as `gold_actions` uses them."""

    def __init__(self, draws: list[tuple[str, ...]], ripe_after: int = 0) -> None:
        self.draws, self.ripe_after, self.gold_loads = list(draws), ripe_after, 0
        self.server = self

    def load(self, name: str, variation: int, simplifications: str, generateGoldPath: bool = False) -> None:
        if generateGoldPath:
            self.path, self.gold_loads = self.draws.pop(0), self.gold_loads + 1
        self.reset()

    def get_gold_action_sequence(self) -> tuple[str, ...]:
        return self.path

    def reset(self) -> None:
        self.moves, self.ticks, self.score, self.completed, self.apple = 0, 0, 0.0, False, False

    def step(self, action: str) -> str:
        if action == "wait1":
            self.moves, self.ticks = self.moves + 2, self.ticks + 1
            return "You decide to wait for 1 iterations."
        if action == "focus on apple" and self.ticks < self.ripe_after:
            return gold.NO_MATCH
        self.moves, self.ticks = self.moves + 1, self.ticks + 1
        self.apple |= action == "focus on apple"
        if action.startswith("focus on") and "box" in action:
            # with an apple to grow, the task is the apple first, then the box
            solved = action == RIGHT[1] and (self.apple or not self.ripe_after)
            self.score, self.completed = (1.0 if solved else -1.0), True
        return "ok"

    def getScore(self) -> float:
        return self.score

    def getCompleted(self) -> bool:
        return self.completed

    def getNumMoves(self) -> int:
        return self.moves


@pytest.fixture
def simulator(monkeypatch):
    monkeypatch.setattr(gold, "_cache", {})
    monkeypatch.setattr(gold, "_drawing", {})

    def use(game: StandIn) -> StandIn:
        @contextmanager
        def one_game():
            yield game

        monkeypatch.setattr(gold, "_gold_game", one_game)
        return game

    return use


TASK = make_task("mendelian-genetics-known-plant", 41, "train")


def test_a_wrong_draw_is_drawn_again_and_the_right_one_is_played(simulator):
    game = simulator(StandIn([WRONG, RIGHT, WRONG]))
    assert gold.gold_actions(TASK) == RIGHT and game.gold_loads == 2
    assert gold.gold_actions(TASK) == RIGHT and game.gold_loads == 2  # cached: no draw again


def test_a_draw_that_outlasts_the_step_limit_is_drawn_again(simulator):
    long = ("look at pot",) * TASK.step_limit + RIGHT
    game = simulator(StandIn([long, RIGHT]))
    assert gold.gold_actions(TASK) == RIGHT and game.gold_loads == 2


def test_a_path_the_package_gets_wrong_every_time_is_played_after_the_last_draw(simulator):
    game = simulator(StandIn([WRONG] * (gold.DRAWS + 1)))
    assert gold.gold_actions(TASK) == WRONG and game.gold_loads == gold.DRAWS


def test_the_check_waits_for_a_world_behind_its_path_as_the_policy_does(simulator):
    """A path whose `focus on apple` comes three ticks before the apple has grown completes once
    the replay waits, so it is kept (the env's replay waits the same way,
    tests/envs/scienceworld); one that would need more than `PATIENCE` waits is drawn again."""
    ripe = ("focus on apple", *RIGHT)
    game = simulator(StandIn([ripe, WRONG], ripe_after=3))
    assert gold.gold_actions(TASK) == ripe and game.gold_loads == 1
    gold._cache.clear()
    later = ("go to greenhouse", "look around", "focus on apple", "focus on blue box")
    game = simulator(StandIn([ripe, later], ripe_after=gold.PATIENCE + 1))
    assert gold.gold_actions(TASK) == later and game.gold_loads == 2
