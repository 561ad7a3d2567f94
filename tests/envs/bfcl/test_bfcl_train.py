"""`arborl train` on `arborl/BFCL-v0`: a couple of RL steps of the tiny model on bfcl-simple
run end to end (episodes scored by bfcl-eval's checker, no infrastructure failure). The
untrained tiny model makes no valid call, so its groups are uniform (all 0) and GRPO has no
gradient to take: this checks the plumbing, not learning."""

from __future__ import annotations

import subprocess
import sys

import pytest

from arborl.trainer.local.metrics_log import read_metrics


@pytest.mark.slow
def test_two_rl_steps_on_bfcl(tmp_path):
    run = tmp_path / "bfcl"
    args = [
        "rollout.env_id=arborl/BFCL-v0",
        "tasks.train=suite:bfcl-simple",
        "tasks.eval_suite=bfcl-simple",
        "tasks.eval_size=2",
        "sft.steps=0",
        "model.tiny={}",
        "run.time_budget_min=null",
        "run.steps=2",
        "run.eval_every=100",
        "rollout.group_size=2",
        "rollout.groups_per_step=2",
        "rollout.max_turns=1",
        "rollout.max_new_tokens=16",
        "rollout.max_context_tokens=2048",
        f"run.dir={run}",
    ]
    res = subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", "train", *args], capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    metrics = read_metrics(run)
    rl = [e for e in metrics if e.get("phase") == "rl"]
    assert [e["step"] for e in rl] == [1, 2], metrics
    assert all(e["rollout/infra_failures"] == 0 and "rollout/reward" in e for e in rl), rl
    assert "RL (2 steps)" in res.stdout
