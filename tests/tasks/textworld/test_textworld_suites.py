"""The TextWorld suites: four tw-make challenges, generated offline, validated by `arborl eval`
(gold: the game's walkthrough, 100 %; empty: 0 %) on their first game each; the whole suites
run in tests/eval/test_suite_validation.py (slow)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from arborl.tasks import get_suite
from arborl.tasks.textworld import GameError, TextWorldTask, ensure_game, game_metadata

SUITES = ("textworld-coin", "textworld-treasure", "textworld-cooking", "textworld-simple")


def test_the_four_challenges_are_registered_with_fixed_seeds():
    for name in SUITES:
        suite = get_suite(name)
        tasks = suite.tasks()
        assert suite.env_id == "arborl/TextWorld-v0" and len(tasks) == 8
        assert [t.seed for t in tasks] == list(range(8))
        assert len({t.challenge for t in tasks}) == 1


def test_a_game_is_generated_once_and_the_same_from_its_seed(tmp_path):
    task = TextWorldTask(id="t", challenge="tw-treasure_hunter", args=("--level", "1"), seed=3)
    first = ensure_game(task, tmp_path / "a")
    again = ensure_game(task, tmp_path / "b")
    assert first != again and first.stat().st_size > 0
    assert (
        game_metadata(task, tmp_path / "a")["walkthrough"]
        == game_metadata(task, tmp_path / "b")["walkthrough"]
    )
    assert (
        json.loads(first.with_suffix(".json").read_text())["world"]
        == json.loads(again.with_suffix(".json").read_text())["world"]
    )
    mtime = first.stat().st_mtime_ns
    assert ensure_game(task, tmp_path / "a") == first and first.stat().st_mtime_ns == mtime  # cached


def test_bad_game_specs_say_what_is_wrong(tmp_path):
    with pytest.raises(ValidationError, match="either"):
        TextWorldTask(id="t")
    with pytest.raises(ValidationError):
        TextWorldTask(id="t", challenge="tw-nope")
    with pytest.raises(GameError, match="bad tw-coin_collector arguments"):
        ensure_game(TextWorldTask(id="t", challenge="tw-coin_collector", args=("--lvl", "x")), tmp_path)
    with pytest.raises(GameError, match="no such game"):
        ensure_game(TextWorldTask(id="t", game_file=str(tmp_path / "none.z8")))


@pytest.mark.parametrize("suite", SUITES)
def test_gold_resolves_and_empty_does_not(suite, tmp_path):
    for agent, expected in (("gold", 1.0), ("empty", 0.0)):
        run = tmp_path / agent
        cmd = ["eval", f"suite={suite}", f"agent={agent}", "limit=1", f"run.dir={run}", "report=false"]
        res = subprocess.run(
            [sys.executable, "-m", "arborl.cli.main", *cmd], capture_output=True, text=True, timeout=900
        )
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        summary = json.loads((run / "summary.json").read_text())
        assert summary["resolved_rate"] == expected and summary["samples"] == 1, summary
        assert summary["infra_errors"] == 0, summary
