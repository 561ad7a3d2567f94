"""`arborl eval suite=PATH` on a user's own game material, through the CLI: TextWorld games
that `tw-make` and TextWorld's `GameMaker` write, a ScienceWorld variation list, a file of
classic Sokoban levels. Gold resolves all of them, empty none; a room the solver cannot
solve is an environment error of that room; bad inputs stop the run with what is wrong."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from arborl_require import unavailable

#: Microban 1-3 (David W. Skinner's collection), in the standard level format.
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

; Microban 3
  ####
###  ####
#     $ #
# #  #$ #
# . .#@ #
#########
"""


def arborl(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
        env={**os.environ, **env},
    )


def validate(suite: Path, run: Path, *extra: str, **env: str) -> dict[str, dict]:
    """The summaries of `arborl eval` with agent=gold and agent=empty."""
    out = {}
    for agent in ("gold", "empty"):
        res = arborl(
            "eval",
            f"suite={suite}",
            f"agent={agent}",
            f"run.dir={run / agent}",
            "report=false",
            *extra,
            **env,
        )
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        out[agent] = json.loads((run / agent / "summary.json").read_text())
    return out


def assert_valid(summaries: dict[str, dict], n: int) -> None:
    gold, empty = summaries["gold"], summaries["empty"]
    assert gold["resolved_rate"] == 1.0 and gold["samples"] == n, gold
    assert empty["resolved_rate"] == 0.0 and empty["samples"] == n, empty
    assert all(s["infra_errors"] == 0 and s["env_errors"] == 0 for s in (gold, empty)), summaries


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> Path:
    """Two games from `tw-make` (a custom one and a coin collector) and one built with
    TextWorld's GameMaker whose .json carries no walkthrough (TextWorld derives it)."""
    folder = tmp_path_factory.mktemp("games")
    tw_make = str(Path(sys.executable).parent / "tw-make")
    for args in (
        [
            "custom",
            "--world-size",
            "2",
            "--nb-objects",
            "2",
            "--quest-length",
            "1",
            "--seed",
            "3",
            "--output",
            "custom.z8",
        ],
        ["tw-coin_collector", "--level", "1", "--seed", "2", "--output", "coin/coin.z8"],
    ):
        res = subprocess.run(
            [tw_make, *args, "--silent"], cwd=folder, capture_output=True, text=True, timeout=300
        )
        assert res.returncode == 0, res.stderr[-2000:]
    made = folder / "made" / "apple.z8"
    maker = f"""
import json, textworld
M = textworld.GameMaker()
kitchen, pantry = M.new_room("Kitchen"), M.new_room("Pantry")
M.connect(kitchen.east, pantry.west)
M.set_player(kitchen)
apple = M.new(type="o", name="apple")
pantry.add(apple)
M.set_quest_from_commands(["go east", "take apple"])
M.compile({str(made)!r})
data = json.load(open({str(made.with_suffix(".json"))!r}))
del data["metadata"]["walkthrough"]
json.dump(data, open({str(made.with_suffix(".json"))!r}, "w"))
"""
    res = subprocess.run([sys.executable, "-c", maker], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return folder


@pytest.mark.slow  # generates three games (seconds of CPU each)
def test_textworld_games_of_ones_own(games, tmp_path):
    from arborl.tasks.user_suites import suite_from_path

    tasks = {t.id: t for t in suite_from_path(str(games)).tasks()}
    assert set(tasks) == {"custom", "coin/coin", "made/apple"}
    assert tasks["made/apple"].metadata["walkthrough"] == ["go east", "take apple"]  # derived
    assert_valid(validate(games, tmp_path), 3)


def test_sokoban_levels_of_ones_own(tmp_path):
    levels = tmp_path / "microban.txt"
    levels.write_text(MICROBAN)
    assert_valid(validate(levels, tmp_path), 3)
    # a room the solver cannot solve: the gold run's environment error of that room, never a 0
    levels.write_text(MICROBAN + "\n; stuck\n#####\n#$ .#\n#@  #\n#####\n")
    res = arborl("eval", f"suite={levels}", "agent=gold", f"run.dir={tmp_path / 'stuck'}", "report=false")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    summary = json.loads((tmp_path / "stuck" / "summary.json").read_text())
    assert (
        summary["resolved"] == 3
        and summary["env_errors"] == 1
        and summary["unresolved_by_kind"]["failed"] == 0
    )
    why = (tmp_path / "stuck" / "instances" / "microban-4" / "sample-0" / "error.txt").read_text()
    assert "UnsolvedRoom: room microban-4 (line 28): no solution in 100 moves or fewer" in why


def test_bad_material_stops_the_run_with_what_is_wrong(tmp_path):
    (tmp_path / "no-games").mkdir()
    (tmp_path / "no-games" / "README.txt").write_text("my games will go here\n")
    (tmp_path / "bad-level.txt").write_text(MICROBAN.replace("#  $ #", "#  $x#"))
    (tmp_path / "bad-list.txt").write_text("find-living-thing, 225\nboill, 2\n")
    for path, error in (
        ("no-games", "no-games: a folder with nothing in it that arborl reads as a suite"),
        ("bad-level.txt", "bad-level.txt:6: 'x' at column 5 is not a Sokoban cell"),
        ("bad-list.txt", "bad-list.txt:2: unknown ScienceWorld task 'boill'"),
    ):
        res = arborl("eval", f"suite={path}", "agent=gold", "report=false", cwd=tmp_path)
        assert res.returncode == 2, res.stdout[-3000:] + res.stderr[-3000:]
        assert error in " ".join(res.stdout.split()), res.stdout
        assert not (tmp_path / "runs").exists()  # refused before a run directory is made


@pytest.mark.slow
def test_a_scienceworld_list_of_ones_own(tmp_path):
    if shutil.which("java") is None:
        unavailable("java", "no Java runtime: apt-get install default-jre-headless (scripts/setup.sh does)")
    variations = tmp_path / "variations.csv"
    variations.write_text("task_name,variation\nfind-living-thing,225\nlifespan-longest-lived,93\n")
    # the gold sequences here take at most 16 actions: 30 turns keep the empty run short
    summaries = validate(variations, tmp_path, "max_turns=30", "concurrency=2", ARBORL_SCIENCEWORLD_JVMS="2")
    assert_valid(summaries, 2)


@pytest.mark.slow
def test_arborl_train_takes_a_level_file_as_its_suite(tmp_path):
    from train_cli import train_steps

    levels = tmp_path / "microban.txt"
    levels.write_text(MICROBAN)
    rl = train_steps(
        tmp_path / "run",
        "arborl/Sokoban-v0",
        f"tasks.train=suite:{levels}",
        f"tasks.eval_suite={levels}",
        "tasks.eval_size=1",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=8",
        "rollout.max_context_tokens=4096",
    )
    assert all(e["rollout/turns"] == 2 for e in rl), rl
