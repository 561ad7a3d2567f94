"""Training reports draw one panel per curve that the runs have."""

from __future__ import annotations

import json

from PIL import Image

from arborl.trainer.report import curve_table, plot_runs, running_mean


def write_run(path, sft: bool):
    path.mkdir()
    events = []
    if sft:
        events += [{"phase": "sft", "step": s, "time": 100.0 + s, "sft/nll": 2.0 / s} for s in (1, 2, 3)]
        events.append({"phase": "eval-sft", "step": 3, "time": 103.0, "success": 0.25})
    events += [{"phase": "rl", "step": s, "time": 160.0 + 60 * s, "rollout/reward": 0.1 * s} for s in (1, 2)]
    events += [
        {"phase": "eval-rl", "step": s, "time": 160.0 + 60 * s, "success": 0.25 + 0.25 * s} for s in (1, 2)
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_runs_without_a_warm_start_get_no_empty_nll_panel(tmp_path):
    rl_only = [write_run(tmp_path / "sync", sft=False), write_run(tmp_path / "async", sft=False)]
    with_sft = write_run(tmp_path / "train", sft=True)
    three = Image.open(plot_runs(rl_only, tmp_path / "a.png", labels=["sync", "async"])).size
    four = Image.open(plot_runs([with_sft], tmp_path / "b.png")).size
    assert four[1] == three[1] and four[0] == three[0] * 4 // 3  # 5 inches a panel
    assert "| 3.0 | 75% |" in curve_table(with_sft)  # minutes since the first event (t=101 s)


def test_the_rollout_reward_can_be_smoothed_by_a_running_mean(tmp_path):
    assert running_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert running_mean([2.0, 4.0], 10) == [2.0, 3.0]
    run = write_run(tmp_path / "sync", sft=False)
    assert Image.open(plot_runs([run], tmp_path / "s.png", smooth=10)).size[0] > 0
