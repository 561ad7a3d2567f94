"""Sokoban's rules, reward and reply projection against the values the references define.

References (every number below comes from them, not from arborl's code):
- gym-sokoban, gym_sokoban/envs/sokoban_env.py @ 8e06e44: penalty_for_step -0.1,
  penalty_box_off_target -1, reward_box_on_target 1, reward_finished 10 (lines 34-37);
  `_calc_reward` adds them per step, a step that moves nothing included (lines 158-186).
- verl-agent (zhangyun04/verl-agent @ 24dda38): projection.py lines 21-70 (tags, word order,
  the <think> rule); sokoban/env.py lines 94-95 (action 0 returns -0.1) and 12-21, 124-126
  (the text grid: " <sym> \\t" per cell, rows joined by newlines); ray_trainer.py lines
  200-224 with run_sokoban.sh lines 49-50 (an invalid reply costs 0.1 more).
"""

from __future__ import annotations

import pytest

from arborl.tasks.sokoban.game import Board, BoardError, move_reward, push, render_grid
from arborl.tasks.sokoban.projection import project, turn_reward

STEP, ON, OFF, DONE = -0.1, 1.0, -1.0, 10.0  # gym-sokoban sokoban_env.py:34-37
NO_MOVE = -0.1  # verl-agent sokoban/env.py:95
INVALID = 0.1  # verl-agent run_sokoban.sh:50

ROOM = ("######", "#P_XO#", "#____#", "######")
TWO = ("#######", "#P√_XO#", "#_____#", "#######")


def play(rows, *moves):
    board = Board.parse(rows)
    rewards = []
    for m in moves:
        after = push(board, m)
        rewards.append(move_reward(board, after))
        board = after
    return board, rewards


def test_a_plain_step_costs_the_step_penalty_moved_or_not():
    _, rewards = play(ROOM, "Down", "Down", "Left")  # down, then into the wall, then into the wall
    assert rewards == pytest.approx([STEP, STEP, STEP])


def test_pushing_the_last_box_on_its_target_pays_box_and_finish():
    board, rewards = play(ROOM, "Right", "Right")
    assert rewards == pytest.approx([STEP, STEP + ON + DONE])
    assert board.solved() and board.rows()[1] == "#__P√#"


def test_a_box_onto_and_off_a_target_with_two_boxes():
    board, rewards = play(TWO, "Right")  # the box on a target is pushed off it
    assert rewards == pytest.approx([STEP + OFF])
    assert board.rows()[1] == "#_SXXO#"
    board, rewards = play(("########", "#PXO_XO#", "########"), "Right")
    assert rewards == pytest.approx([STEP + ON])  # one of two on a target: no finish bonus
    assert not board.solved()


def test_a_box_is_not_pushed_into_a_wall_or_another_box():
    board, _ = play(("#####", "#PXX#", "#_O_#", "#_O_#", "#####"), "Right")
    assert board.rows()[1] == "#PXX#"


def test_the_text_grid_is_verl_agents():
    board = Board.parse(("####", "#PX#", "#_O#", "####"))
    expected = "\n".join(
        [" # \t # \t # \t # \t", " # \t P \t X \t # \t", " # \t _ \t O \t # \t", " # \t # \t # \t # \t"]
    )
    assert render_grid(board) == expected
    on_target = Board.parse(("####", "#S_#", "#X_#", "####"))
    assert " S \t" in render_grid(on_target)


@pytest.mark.parametrize(
    ("reply", "move", "valid"),
    [
        ("<think>go</think><action>up</action>", "Up", True),
        ("<think>go</think><action> LEFT </action>", "Left", True),  # lower-cased, stripped
        ("<think>go</think><action>upward</action>", "Up", True),  # a word inside counts
        ("<think>go</think><action>down, no, up</action>", "Up", True),  # up is looked for first
        ("<think>go</think><action>still</action>", None, True),  # a valid no-move
        ("<action>right</action>", "Right", False),  # no think: played, but invalid
        ("<think>go</think>right", None, False),  # no tags
        ("<think>go</think><action>jump</action>", None, False),
        ("<think>go</think></action>up<action>", None, False),  # end tag first: empty action
        ("", None, False),
    ],
)
def test_replies_are_read_as_verl_agents_projection_reads_them(reply, move, valid):
    p = project(reply)
    assert (p.move, p.valid) == (move, valid)


def test_a_turn_reward_adds_verl_agents_no_move_and_invalid_penalties():
    board = Board.parse(ROOM)
    _, still = turn_reward(board, project("<think>x</think><action>still</action>"))
    _, junk = turn_reward(board, project("no idea"))
    _, unthought = turn_reward(board, project("<action>down</action>"))
    assert still == pytest.approx(NO_MOVE)
    assert junk == pytest.approx(NO_MOVE - INVALID)
    assert unthought == pytest.approx(STEP - INVALID)


def test_a_room_that_is_not_one_says_what_is_wrong():
    with pytest.raises(BoardError, match="one player"):
        Board.parse(("####", "#XO#", "####"))
    with pytest.raises(BoardError, match="unknown cell"):
        Board.parse(("####", "#PZ#", "####"))
