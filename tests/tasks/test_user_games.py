"""`suite=PATH` for games: TextWorld game folders, ScienceWorld variation lists and Sokoban level
files, told apart by their content; every malformed input refused with what is wrong and where.
The same files through `arborl eval` (gold 100 %, empty 0 %): tests/eval/test_user_games_eval.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arborl.tasks import get_suite
from arborl.tasks.sokoban.game import Board
from arborl.tasks.sokoban.solver import search, solve
from arborl.tasks.sokoban.user import UnsolvedRoom, gold_policy, load_rooms, win_limit
from arborl.tasks.sokoban.xsb import parse_levels, to_board
from arborl.tasks.stream import task_stream
from arborl.tasks.suites import SuiteError
from arborl.tasks.textworld.user import story_kind
from arborl.tasks.user_suites import detect_kind, suite_from_path

#: Microban 1 and 2 (David W. Skinner's collection), as collections write them.
MICROBAN = """; Microban 1
####
# .#
#  ###
#*@  #
#  $ #
#  ###
####

; Microban 2
######
#    #
# #@ #
# $* #
# .* #
#    #
######
"""


def z_machine(size: int = 1024) -> bytes:
    """A file with a Z-machine v8 header (its declared length within the file): a story file
    as far as the header says."""
    head = bytearray(size)
    head[0] = 8
    head[0x1A:0x1C] = (size // 8).to_bytes(2, "big")
    return bytes(head)


def test_each_kind_is_told_from_its_content_not_its_name(tmp_path):
    (tmp_path / "rooms.dat").write_text(MICROBAN)
    (tmp_path / "pairs.csv").write_text("task_name,variation\nboil,21\n")
    (tmp_path / "games").mkdir()
    (tmp_path / "games" / "a.z8").write_bytes(z_machine())
    (tmp_path / "games" / "a.json").write_text(json.dumps({"world": [], "quests": [], "infos": []}))
    assert detect_kind(tmp_path / "rooms.dat") == "sokoban"
    assert detect_kind(tmp_path / "pairs.csv") == "scienceworld"
    assert detect_kind(tmp_path / "games") == "textworld"
    assert detect_kind(tmp_path / "games" / "a.json") == "textworld"  # one game, by its description
    (tmp_path / "notes.txt").write_text("some notes\nabout nothing\n")
    with pytest.raises(
        SuiteError, match=r"not JSON .* TextWorld games .* ScienceWorld list .* Sokoban levels"
    ):
        suite_from_path(str(tmp_path / "notes.txt"))


def test_the_standard_level_format_becomes_the_envs_grid():
    levels = parse_levels(MICROBAN, "m.txt")
    assert [(lv.title, lv.line) for lv in levels] == [("Microban 1", 2), ("Microban 2", 11)]
    # rows padded to a rectangle, the outside walled; `*` a box on a goal, `@` the player
    assert to_board(levels[0]).rows() == (
        "######",
        "#_O###",
        "#__###",
        "#√P__#",
        "#__X_#",
        "#__###",
        "######",
    )
    board = Board.parse(to_board(levels[1]).rows())
    assert len(board.boxes) == 3 and board.boxes_on_target() == 2
    assert solve(to_board(levels[0])) is not None
    # a title below a level, `-` floors, text between levels, `;` titles without blank lines
    other = parse_levels(
        "Level one\n#####\n#@$.#\n#####\nTitle: first\nAuthor: me\n\n######\n#-@$.#\n######\n"
    )
    assert [lv.title for lv in other] == ["first", ""]
    assert [to_board(lv).rows()[1] for lv in other] == ["#PXO#", "#_PXO#"]
    packed = parse_levels("; 1\n#####\n#@$.#\n#####\n; 2\n#####\n#.$@#\n#####\n")
    assert [(lv.title, lv.line) for lv in packed] == [("1", 2), ("2", 6)]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("#####\n#@$x.#\n######\n", r"m.txt:2: 'x' at column 4 is not a Sokoban cell"),
        (
            "#####\n#@$ .\n#####\n",
            r"m.txt:1: the room is not closed by walls: the player can walk out at row 2, column 5",
        ),
        ("#####\n#@$.#\n#####  $\n", r"the box at row 3, column 8 is outside the player's walls"),
        ("######\n#@$.@#\n######\n", r"a level has one player \(@ or \+\), this one has 2"),
        ("######\n#@$$.#\n######\n", r"as many boxes as targets: 1 players, 2 boxes, 1 targets"),
        ("; only a comment\n\n###\n", r"a level has one player"),
    ],
)
def test_a_malformed_level_says_what_and_where(tmp_path, text, error):
    path = tmp_path / "m.txt"
    path.write_text(text)
    with pytest.raises(SuiteError, match=error):
        suite_from_path(str(path))


def test_rooms_are_solved_within_the_limit_where_a_win_still_scores(tmp_path):
    path = tmp_path / "rooms.txt"
    corner = "#####\n#$ .#\n#@  #\n#####\n"  # the box is in a corner: no solution
    path.write_text(MICROBAN + "\n; stuck\n" + corner)
    one, two, stuck = load_rooms(path)
    # verl-agent's reward: -0.1 a move, +1 a box onto a goal, +10 solved; a total of 1 is success
    assert win_limit(one.board()) == 90 + 10 * 1 and win_limit(two.board()) == 90 + 10 * 1
    assert one.metadata["optimal_moves"] == len(one.solution) == len(solve(one.board()))
    assert one.max_steps == max(15, 2 * len(one.solution))
    assert stuck.solution == () and "no solution in 100 moves" in stuck.metadata["unsolved"]
    with pytest.raises(UnsolvedRoom, match=r"rooms-3 \(line \d+\): no solution") as e:
        gold_policy(stuck)
    assert e.value.environment_broken  # evaluation: an environment error of the room, not a 0
    big = search(one.board(), max_states=5)
    assert big.moves is None and not big.exhausted and big.states == 5


def test_a_scienceworld_list_is_checked_against_the_package(tmp_path):
    path = tmp_path / "sw.txt"
    path.write_text("# task_name, variation\nfind-living-thing, 225\n\nlifespan-longest-lived 93\n")
    suite = suite_from_path(str(path))
    tasks = suite.tasks()
    assert suite.env_id == "arborl/ScienceWorld-v0"
    assert [(t.task_name, t.variation, t.split) for t in tasks] == [
        ("find-living-thing", 225, "test"),
        ("lifespan-longest-lived", 93, "test"),
    ]
    assert tasks[1].metadata["line"] == 4 and suite.max_turns >= 100
    for text, error in (
        (
            "boil, 1\nboill, 2\n",
            r"sw.txt:2: unknown ScienceWorld task 'boill'; the package's tasks are boil, ",
        ),
        ("boil, 30\n", r"sw.txt:1: boil has variations 0..29, not 30"),
        ("boil, 1\nboil 1\n", r"sw.txt:2: boil 1 again \(first on line 1\)"),
        ("boil, 1\nboil, one\n", r"sw.txt:2: 'boil, one' is not `task_name, variation`"),
    ):
        path.write_text(text)
        with pytest.raises(SuiteError, match=error):
            suite_from_path(str(path))


def test_textworld_games_that_cannot_be_played_are_refused(tmp_path):
    games = tmp_path / "games"
    games.mkdir()
    (games / "old.ulx").write_bytes(b"Glul" + bytes(60))
    (games / "lone.z8").write_bytes(z_machine())
    (games / "half.json").write_text(json.dumps({"world": [], "quests": [], "infos": []}))
    (games / "story.z5").write_bytes(z_machine())
    assert story_kind(games / "old.ulx") == "glulx" and story_kind(games / "story.z5") == "zmachine"
    with pytest.raises(SuiteError) as e:
        suite_from_path(str(games))
    text = str(e.value)
    assert "old.ulx: a Glulx game; TextWorld 1.7 plays Z-machine games only" in text
    assert "lone.z8: no TextWorld lone.json beside it" in text
    assert "half.json: a TextWorld game description without its compiled game half.z8" in text
    assert "story.z5: a Z-machine story not named .z8" in text
    # a folder with no game (tw-make's Inform source alone, notes) names what arborl reads
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "game.ni").write_text('"a game" by "me"\n')
    with pytest.raises(
        SuiteError, match=r"none: a folder with nothing in it that arborl reads .* TextWorld games"
    ):
        suite_from_path(str(tmp_path / "none"))
    # a file that only looks like a story by its first byte is not one (its header's length)
    (tmp_path / "data.bin").write_bytes(b"\x08" + bytes(100))
    assert story_kind(tmp_path / "data.bin") is None


def test_training_takes_a_path_where_it_takes_a_suite(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("rooms.txt").write_text(MICROBAN)
    suite = get_suite("rooms.txt")  # `tasks.eval_suite=rooms.txt`
    assert suite is get_suite("rooms.txt") and [t.id for t in suite.tasks()] == ["rooms-1", "rooms-2"]
    stream = task_stream("suite:rooms.txt", 4, seed=0)  # `tasks.train=suite:rooms.txt`
    assert {stream(i).id for i in range(4)} == {"rooms-1", "rooms-2"}
    with pytest.raises(SuiteError, match="unknown suite 'no-such-suite'"):
        get_suite("no-such-suite")
