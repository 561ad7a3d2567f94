"""Training reports draw one panel per curve that the runs have, and give each phase's own
held-out success before and after it."""

from __future__ import annotations

import json

from PIL import Image

from arborl.trainer.local.metrics_log import read_metrics
from arborl.trainer.local.report import curve_table, headline_lines, plot_runs, running_mean, write_report


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


def write_main_job(path):
    """The evaluations as the main job logs them (`trainer/loop.py`): the warm start's at its
    step 0 (the starting model) and its end, the same numbers again as RL's step 0, then RL's."""
    path.mkdir()
    events = [{"phase": "eval-sft", "step": 0, "time": 100.0, "success": 0.0}]
    events += [{"phase": "sft", "step": s, "time": 100.0 + s, "sft/nll": 2.0 / s} for s in (1, 2, 3)]
    events += [
        {"phase": "eval-sft", "step": 3, "time": 104.0, "success": 0.36},
        {"phase": "eval-rl", "step": 0, "time": 104.0, "success": 0.36},
        {"phase": "rl", "step": 1, "time": 110.0, "rollout/reward": 0.5},
        {"phase": "eval-rl", "step": 1, "time": 111.0, "success": 0.7},
        {"phase": "rl", "step": 2, "time": 120.0, "rollout/reward": 0.8},
        {"phase": "eval-rl", "step": 2, "time": 121.0, "success": 0.86},
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    summary = {"rl_steps": 2, "sft_steps": 3, "initial_success": 0.0, "final_success": 0.86}
    (path / "summary.json").write_text(json.dumps(summary))
    return path, summary


def test_the_report_gives_rl_its_own_before_and_after(tmp_path):
    """Issue 37 point 8: what RL did is 36 % → 86 %, not 0 % (before the warm start) → 86 %."""
    run, _ = write_main_job(tmp_path / "train")
    _, page = write_report([run])
    assert "<td>0% → 36%</td><td><b>36% → 86%</b></td>" in page.read_text()


def test_the_main_jobs_last_lines_are_each_phases_own_before_and_after(tmp_path):
    run, summary = write_main_job(tmp_path / "train")
    assert headline_lines(read_metrics(run), summary) == [
        "warm start (3 steps): held-out success 0% → 36% (+36 points)",
        "RL (2 steps): held-out success 36% → 86% (+50 points)",
    ]
    no_warm_start = [e for e in read_metrics(run) if e["phase"] != "eval-sft"]
    assert headline_lines(no_warm_start, {"rl_steps": 1}) == [
        "RL (1 step): held-out success 36% → 86% (+50 points)"
    ]
