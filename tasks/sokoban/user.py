"""A user's Sokoban levels as a suite (`arborl eval suite=LEVELS.txt`).

The file is in the standard text format (`xsb.py`); every level becomes a `SokobanTask` on
`arborl/Sokoban-v0`, with verl-agent's prompt, moves and reward, as `sokoban-6x6`'s rooms.
Rooms may have any size and several boxes.

Its limit, `win_limit`: with verl-agent's reward (-0.1 a move, +1 a box onto a goal, +10
solved) an episode's total, which evaluation scores clipped to [0, 1], reaches 1 only for a
win within 90 + 10 x (boxes off their goals at the start) moves; a later win scores below 1
and counts unresolved. So when the suite's tasks load, each room is solved by
`solver.search` (breadth-first: a shortest solution) within that many moves and `MAX_STATES`
states, and gets `min(max(15, 2 x its shortest solution), win_limit)` turns (verl-agent's 15
at least, room to err on longer ones, none past a win that could still score). A room the
solver cannot solve within those limits gets `win_limit` turns and is marked `unsolved` in
its metadata: its gold policy raises `UnsolvedRoom`, which evaluation records as an
environment error of that room (never a score of 0), with the solver's reason; any other
agent plays it as it is.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from ..common import Policy
from ..suites import Suite, SuiteError
from .game import BOX_ON_TARGET_REWARD, FINISHED_REWARD, STEP_PENALTY, Board, push
from .solver import search
from .suite import _reply, _shown_board
from .task import MAX_STEPS, SokobanTask
from .xsb import LevelFormatError, parse_levels, to_board

MAX_STATES = 200_000


class UnsolvedRoom(RuntimeError):
    """The solver found no solution of a room within its limits: the room, not the agent,
    is the problem (`environment_broken`: evaluation records an environment error)."""

    environment_broken = True


def win_limit(board: Board) -> int:
    """The most moves in which a win of this room still scores 1 (module doc)."""
    off_goal = len(board.boxes - board.targets)
    return round((FINISHED_REWARD - 1 + off_goal * BOX_ON_TARGET_REWARD) / -STEP_PENALTY)


def read_rooms(path: Path) -> list[tuple[str, Board, int, str]]:
    """(task id, board, line, title) of every level of the file; SuiteError on a bad one."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SuiteError(f"{path}: cannot read Sokoban levels: {e}") from None
    try:
        levels = parse_levels(text, str(path))
        rooms = [
            (f"{path.stem}-{i}", to_board(lv, str(path)), lv.line, lv.title) for i, lv in enumerate(levels, 1)
        ]
    except LevelFormatError as e:
        raise SuiteError(str(e)) from None
    if not rooms:
        raise SuiteError(f"{path}: no Sokoban level in it (rows of {'#$.@*+'} and spaces)")
    return rooms


def load_rooms(path: Path) -> list[SokobanTask]:
    """The file's rooms, each solved (module doc)."""
    tasks = []
    for task_id, board, line, title in read_rooms(path):
        limit = win_limit(board)
        found = search(board, limit, MAX_STATES)
        meta: dict[str, Any] = {"suite": str(path), "line": line, "title": title}
        solution: tuple[str, ...] = ()
        turns = limit
        if found.moves is not None:
            solution = tuple(found.moves)
            meta["optimal_moves"] = len(solution)
            turns = min(max(MAX_STEPS, 2 * len(solution)), limit)
        elif found.exhausted:
            meta["unsolved"] = f"no solution in {limit} moves or fewer (a later win scores below 1)"
        else:
            meta["unsolved"] = f"no solution found within {MAX_STATES:,} states (moves up to {limit})"
        tasks.append(
            SokobanTask(id=task_id, rows=board.rows(), solution=solution, max_steps=turns, metadata=meta)
        )
    return tasks


def gold_policy(task: SokobanTask) -> Policy:
    """The room's shortest solution, move by move, from the board the env shows; off that
    path (a context that lost turns), the solver's next move from the shown board."""
    if "unsolved" in task.metadata:
        raise UnsolvedRoom(f"room {task.id} (line {task.metadata.get('line')}): {task.metadata['unsolved']}")
    plan: dict[tuple[str, ...], str] = {}
    board = task.board()
    for move in task.solution:
        plan[board.rows()] = move
        board = push(board, move)

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        shown = _shown_board(messages, task)
        move = plan.get(shown.rows())
        if move is None:
            moves = search(shown, win_limit(shown), MAX_STATES).moves
            move = moves[0] if moves else "still"
        return _reply(move)

    return policy


def sokoban_suite(name: str, path: Path) -> Suite:
    """The suite of the levels in `path` (read now, so a malformed file fails at once; solved
    when its tasks load)."""
    rooms = read_rooms(path)
    return Suite(
        name,
        "arborl/Sokoban-v0",
        partial(load_rooms, path),
        description=f"Sokoban levels from {path}",
        gold="arborl.tasks.sokoban.user:gold_policy",
        empty="arborl.tasks.sokoban.suite:empty_policy",
        max_turns=max(win_limit(board) for _, board, _, _ in rooms),
        tags=("game", "multi-turn", "user"),
    )
