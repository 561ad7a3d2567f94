"""sokoban-6x6-image through `arborl eval`: the scripted gold solves every room from the
pictures' env as from the text one, and a vision-language model (the tiny Qwen2-VL, by
path) plays it end to end, its processor loaded for it (issue 52 §6's first step)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def arborl_eval(tmp_path, *overrides):
    res = subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", "eval", f"run.dir={tmp_path}", "report=false", *overrides],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return json.loads((tmp_path / "summary.json").read_text())


def test_gold_solves_every_room_shown_as_a_picture(tmp_path):
    summary = arborl_eval(tmp_path, "suite=sokoban-6x6-image", "agent=gold")
    assert summary["samples"] == 100 and summary["resolved_rate"] == 1.0, summary


@pytest.mark.slow
def test_a_vision_language_model_plays_it_by_path(tmp_path, tiny_vlm):
    summary = arborl_eval(
        tmp_path,
        "suite=sokoban-6x6-image",
        "agent=model",
        f"model.path={tiny_vlm}",
        "limit=2",
        "max_turns=2",
        "model.max_new_tokens=8",
    )
    assert summary["samples"] == 2 and summary.get("errors", 0) == 0, summary
    assert summary["resolved_rate"] == 0.0  # an untrained model; what matters is that it ran
