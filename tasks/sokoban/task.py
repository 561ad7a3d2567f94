"""The Sokoban task: a room, a shortest solution of it, and the turn budget."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ..task_types import Task
from .game import DIRECTIONS, Board

#: verl-agent's Sokoban turn budget (env.max_steps=15, examples/gigpo_trainer/run_sokoban.sh,
#: line 57, zhangyun04/verl-agent @ 24dda38).
MAX_STEPS = 15


class SokobanTask(Task):
    """A room to solve. `rows` uses verl-agent's symbols (`game.SYMBOLS`), one character a
    cell; `solution` is a shortest solution (the gold policy plays it)."""

    kind: Literal["sokoban"] = "sokoban"
    rows: tuple[str, ...] = Field(min_length=3, description="the room, one string a row")
    solution: tuple[str, ...] = Field((), description="a shortest solution: Up, Down, Left, Right")
    max_steps: int = Field(MAX_STEPS, ge=1, description="turns before the episode is cut short")

    @field_validator("rows")
    @classmethod
    def _a_room(cls, rows: tuple[str, ...]) -> tuple[str, ...]:
        Board.parse(rows)  # raises BoardError (a ValueError) with what is wrong
        return rows

    @field_validator("solution")
    @classmethod
    def _moves(cls, moves: tuple[str, ...]) -> tuple[str, ...]:
        bad = [m for m in moves if m not in DIRECTIONS]
        if bad:
            raise ValueError(f"moves are {sorted(DIRECTIONS)}, got {bad}")
        return moves

    def board(self) -> Board:
        return Board.parse(self.rows)
