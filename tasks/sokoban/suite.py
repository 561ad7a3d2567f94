"""`sokoban-6x6`: 100 held-out rooms, a training stream that never hands one out, policies.

- `load_suite()`: the rooms of seeds ``eval:0``, ``eval:1``, ... (`levels.generate_level`,
  6x6, one box, verl-agent's search depth 30), the first 100 distinct ones.
- `generate_train_tasks(n, seed)`: `arborl train tasks.train=` generator: rooms of seeds
  ``train:<seed>:<i>``, skipping any room the suite holds (a 6x6 room has a 4x4 inside, so
  the two seed spaces meet now and then).
- `tokenizer_text()`: the text of training rooms' turns, for a tiny model's tokenizer
  (`model.tiny.domain_text`).
- `gold_policy`: plays a shortest solution from the board it is shown, in verl-agent's reply
  format; `empty_policy`: replies nothing (no move, an invalid reply, every turn).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..common import Policy
from ..stream import draw_unseen
from .game import DIRECTIONS, Board, push, render_grid
from .levels import generate_level
from .picture import read_image
from .prompt import board_prompt, current_grid, first_prompt, prompt
from .solver import solve
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
    """A shortest solution's next move from the board of the latest observation.

    Solved again every turn from what the env shows now, not the n-th move of `task.solution`
    counted by replies: a context that drops old turns (a sliding window, a summary) or a
    harness that shows only the latest prompt would make the count wrong."""

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        moves = solve(_shown_board(messages, task))
        return _reply(moves[0]) if moves else _reply("still")

    return policy


def _shown_board(messages: list[dict[str, Any]], task: SokobanTask) -> Board:
    """The board of the newest user message that shows one (the env's latest observation):
    its text grid, or its picture (`picture.read_image`) when the env shows images."""
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        for part in reversed(content if isinstance(content, list) else [{"type": "text", "text": content}]):
            rows = None
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                rows = current_grid(part["text"])
            elif part.get("type") == "image":
                rows = read_image(np.asarray(part["image"]))
            if rows is not None:
                return Board.parse(rows)
    raise ValueError(
        f"task {task.id}: no user message shows a Sokoban board (verl-agent's prompt, "
        "'your current observation is:' and the grid, or the room's picture); give the policy "
        "the env's observations"
    )


def empty_policy(task: SokobanTask) -> Policy:
    """Says nothing: no move and an invalid reply every turn, so the room stays unsolved."""
    return lambda messages, info: ""


def tokenizer_text(n: int = 300) -> list[str]:
    """What a model playing Sokoban reads and writes, for a locally trained tokenizer
    (`agents.tiny`, `model.tiny.domain_text`): the first prompt, verl-agent's later prompts
    and `board_prompt`'s, and the gold replies, over `n` rooms of a training stream of their
    own (never the suite's). A tokenizer that has read it spends about 430 tokens on the
    first prompt and 80 on a board, against 760 and 115 for one trained on tool-mini's text."""
    held_out = {task.rows for task in load_suite()}
    lines: list[str] = []
    for task in generate_train_tasks(n, seed=7919):
        boards, history, turns = [task.board()], [], []
        for move in (*task.solution, *DIRECTIONS)[:4]:
            history.append((render_grid(boards[-1]), move))
            boards.append(push(boards[-1], move))
            turns += [
                prompt(render_grid(boards[-1]), history),
                board_prompt(render_grid(boards[-1])),
                _reply(move),
            ]
        # a few moves into a training room can be a held-out room's start: such a room is left out
        if not any(board.rows() in held_out for board in boards):
            lines += [first_prompt(render_grid(boards[0])), *turns]
    return lines
