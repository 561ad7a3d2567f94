"""`sokoban-6x6`: 100 held-out rooms, a training stream that never hands one out, policies.

- `load_suite()`: the rooms of seeds ``eval:0``, ``eval:1``, ... (`levels.generate_level`,
  6x6, one box, verl-agent's search depth 30), the first 100 distinct ones.
- `generate_train_tasks(n, seed)`: `arborl train tasks.train=` generator: rooms of seeds
  ``train:<seed>:<i>``, skipping any room the suite holds (a 6x6 room has a 4x4 inside, so
  the two seed spaces meet now and then).
- `gold_policy`: plays the solver's shortest solution in verl-agent's reply format;
  `empty_policy`: replies nothing (no move, an invalid reply, every turn).
"""

from __future__ import annotations

import itertools
from typing import Any

from ..common import Policy
from ..stream import draw_unseen
from .levels import generate_level
from .task import MAX_STEPS, SokobanTask

SUITE_SIZE = 100


def _task(task_id: str, seed: str, max_steps: int = MAX_STEPS) -> SokobanTask:
    level = generate_level(seed, max_moves=max_steps)
    return SokobanTask(
        id=task_id,
        rows=level.board.rows(),
        solution=level.solution,
        max_steps=max_steps,
        metadata={"suite": "sokoban-6x6", "seed": seed, "optimal_moves": len(level.solution)},
    )


def load_suite(size: int = SUITE_SIZE) -> list[SokobanTask]:
    """The suite's `size` rooms (distinct), in seed order."""
    tasks: list[SokobanTask] = []
    seen: set[tuple[str, ...]] = set()
    for i in itertools.count():
        if len(tasks) == size:
            return tasks
        task = _task(f"sokoban-6x6-{len(tasks):03d}", f"eval:{i}")
        if task.rows not in seen:
            seen.add(task.rows)
            tasks.append(task)
    raise AssertionError("unreachable")


def generate_train_tasks(n: int, seed: int = 0, **options: Any) -> list[SokobanTask]:
    """`n` training rooms, reproducible by `seed`, none of them a room of the suite.
    `options`: `max_steps` (the turn budget, verl-agent's 15)."""
    max_steps = int(options.pop("max_steps", MAX_STEPS))
    if options:
        raise ValueError(f"unknown options {sorted(options)}; generate_train_tasks takes max_steps")
    counter = itertools.count()

    def draw() -> SokobanTask:
        i = next(counter)
        return _task(f"sokoban-train-{seed}-{i}", f"train:{seed}:{i}", max_steps)

    return draw_unseen(n, draw, lambda t: t.rows, load_suite())


def _reply(move: str) -> str:
    return f"<think>The solver's next move.</think><action>{move.lower()}</action>"


def gold_policy(task: SokobanTask) -> Policy:
    """The task's shortest solution, one move a turn (the n-th reply plays the n-th move)."""

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        played = sum(m.get("role") == "assistant" for m in messages)
        moves = task.solution
        return _reply(moves[played]) if played < len(moves) else _reply("still")

    return policy


def empty_policy(task: SokobanTask) -> Policy:
    """Says nothing: no move and an invalid reply every turn, so the room stays unsolved."""
    return lambda messages, info: ""
