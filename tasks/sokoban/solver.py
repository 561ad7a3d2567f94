"""A shortest solution of a room: breadth-first search over (player, boxes) states.

Every level of a suite is checked by this solver, and its moves are the suite's gold policy.
Written here rather than taken from a library: the rooms are 6x6 with one box (a few
hundred states), the search is a dozen lines over `game.push` (so it plays by exactly the
rules the env does), and gym-sokoban ships no solver. A user's rooms (`user.py`) can have
several boxes, so `search` also takes a bound on the states it visits and says which bound
stopped it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .game import DIRECTIONS, Board, push

State = tuple[tuple[int, int], frozenset[tuple[int, int]]]


@dataclass(frozen=True)
class Search:
    """What a search found: `moves` (None: no solution found) and why it stopped without one:
    `exhausted` (every state within the move bound was seen: none exists in that many moves)
    or the state bound (`states` seen)."""

    moves: list[str] | None
    states: int
    exhausted: bool


def solve(board: Board, max_depth: int | None = None) -> list[str] | None:
    """The moves (``"Up"``, ...) of a shortest solution, [] if solved already, None if there
    is none within `max_depth` moves (None: any length)."""
    return search(board, max_depth).moves


def search(board: Board, max_depth: int | None = None, max_states: int | None = None) -> Search:
    """A shortest solution within `max_depth` moves, visiting at most `max_states` states
    (None: no bound)."""
    if board.solved():
        return Search([], 1, False)
    start: State = (board.player, board.boxes)
    parent: dict[State, tuple[State, str] | None] = {start: None}
    frontier: deque[tuple[Board, int]] = deque([(board, 0)])
    while frontier:
        here, depth = frontier.popleft()
        if max_depth is not None and depth >= max_depth:
            continue
        for direction in DIRECTIONS:
            nxt = push(here, direction)
            key: State = (nxt.player, nxt.boxes)
            if key in parent:
                continue
            parent[key] = ((here.player, here.boxes), direction)
            if nxt.solved():
                return Search(_path(parent, key), len(parent), False)
            if max_states is not None and len(parent) >= max_states:
                return Search(None, len(parent), False)
            frontier.append((nxt, depth + 1))
    return Search(None, len(parent), True)


def _path(parent: dict[State, tuple[State, str] | None], end: State) -> list[str]:
    moves: list[str] = []
    link = parent[end]
    while link is not None:
        prev, direction = link
        moves.append(direction)
        link = parent[prev]
    return moves[::-1]
