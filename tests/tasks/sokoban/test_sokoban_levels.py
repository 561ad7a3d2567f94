"""Seeded room generation, the BFS solver and the sokoban-6x6 suite with its training stream."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from arborl.tasks import get_suite
from arborl.tasks.sokoban.game import Board, push
from arborl.tasks.sokoban.levels import generate_level
from arborl.tasks.sokoban.solver import solve
from arborl.tasks.sokoban.suite import generate_train_tasks, load_suite
from arborl.tasks.sokoban.task import SokobanTask


def replay(board: Board, moves) -> Board:
    for m in moves:
        board = push(board, m)
    return board


def test_a_seed_gives_one_level_and_seeds_differ():
    a, b = generate_level(7), generate_level(7)
    assert a == b
    rooms = {generate_level(s).board.rows() for s in range(40)}
    assert len(rooms) > 30


@pytest.mark.parametrize("seed", range(25))
def test_every_level_is_6x6_one_box_and_its_solution_is_shortest(seed):
    level = generate_level(seed)
    board = level.board
    assert (board.height, board.width, len(board.boxes)) == (6, 6, 1)
    assert not board.solved() and board.player not in board.targets
    assert replay(board, level.solution).solved()
    assert 1 <= len(level.solution) <= 15
    assert solve(board, max_depth=len(level.solution) - 1) is None  # nothing shorter exists


def test_the_solver_says_when_a_room_has_no_solution():
    cornered = Board.parse(("######", "#X__P#", "#___O#", "######"))  # the box is in a corner
    assert solve(cornered) is None
    assert solve(Board.parse(("#####", "#P_√#", "#####"))) == []


def test_the_suite_is_100_distinct_solvable_rooms_registered_with_the_env():
    suite = get_suite("sokoban-6x6")
    tasks = suite.tasks()
    assert suite.env_id == "arborl/Sokoban-v0" and suite.max_turns == 15
    assert len(tasks) == 100 and len({t.rows for t in tasks}) == 100
    assert all(replay(t.board(), t.solution).solved() for t in tasks)
    assert [t.rows for t in load_suite()] == [t.rows for t in tasks]  # reproducible


def test_the_training_stream_is_seeded_and_never_hands_out_a_suite_room():
    held_out = {t.rows for t in load_suite()}
    first, again, other = (
        generate_train_tasks(300, 0),
        generate_train_tasks(300, 0),
        generate_train_tasks(50, 1),
    )
    assert [t.rows for t in first] == [t.rows for t in again]
    assert [t.rows for t in first[:50]] != [t.rows for t in other]
    assert not held_out & {t.rows for t in first}
    assert all(replay(t.board(), t.solution).solved() for t in first)
    with pytest.raises(ValueError, match="unknown options"):
        generate_train_tasks(2, 0, size=8)


def test_a_bad_task_is_refused_with_what_is_wrong():
    with pytest.raises(ValidationError, match="unknown cell"):
        SokobanTask(id="t", rows=("####", "#P?#", "####"))
    with pytest.raises(ValidationError, match="moves are"):
        SokobanTask(id="t", rows=("####", "#PXO#", "####"), solution=("Jump",))
