"""`arborl train` runs RL steps on arborl/Sokoban-v0 with the sokoban-6x6 training stream."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_arborl_train_runs_rl_steps_on_sokoban(tmp_path):
    run = tmp_path / "run"
    args = [
        "rollout.env_id=arborl/Sokoban-v0",
        "tasks.train=arborl.tasks.sokoban.suite:generate_train_tasks",
        "tasks.train_size=64",
        "tasks.eval_suite=sokoban-6x6",
        "tasks.eval_size=2",
        "rollout.group_size=2",
        "rollout.groups_per_step=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=8",
        "rollout.max_context_tokens=4096",  # verl-agent's prompt is ~700 tokens a turn
        "sft.steps=0",
        "model.tiny={}",
        "run.steps=2",
        "run.eval_every=100",
        "run.checkpoint_every=100",
        "run.time_budget_min=null",
        f"run.dir={run}",
    ]
    res = subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", "train", *args], capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [e for e in events if e.get("phase") == "rl"]
    assert [e["step"] for e in rl] == [1, 2]
    # a tiny random model writes no <action> tags: verl-agent's -0.1 (no move) - 0.1 (invalid)
    assert all(e["rollout/reward"] == pytest.approx(-0.2 * e["rollout/turns"]) for e in rl)
