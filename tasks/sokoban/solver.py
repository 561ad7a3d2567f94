"""A shortest solution of a room: breadth-first search over (player, boxes) states.

Every level of a suite is checked by this solver, and its moves are the suite's gold policy.
Written here rather than taken from a library: the rooms are 6x6 with one box (a few
hundred states), the search is a dozen lines over `game.push` (so it plays by exactly the
rules the env does), and gym-sokoban ships no solver.
"""

from __future__ import annotations

from collections import deque

from .game import DIRECTIONS, Board, push

State = tuple[tuple[int, int], frozenset[tuple[int, int]]]


def solve(board: Board, max_depth: int | None = None) -> list[str] | None:
    """The moves (``"Up"``, ...) of a shortest solution, [] if solved already, None if there
    is none within `max_depth` moves (None: any length)."""
    if board.solved():
        return []
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
                return _path(parent, key)
            frontier.append((nxt, depth + 1))
    return None


def _path(parent: dict[State, tuple[State, str] | None], end: State) -> list[str]:
    moves: list[str] = []
    link = parent[end]
    while link is not None:
        prev, direction = link
        moves.append(direction)
        link = parent[prev]
    return moves[::-1]
