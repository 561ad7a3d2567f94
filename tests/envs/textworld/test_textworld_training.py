"""`arborl train` on `arborl/TextWorld-v0`: a couple of RL steps of the tiny model, end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest


@pytest.mark.slow
def test_arborl_train_runs_rl_steps_on_textworld(tmp_path):
    run = tmp_path / "run"
    args = [
        "train",
        "rollout.env_id=arborl/TextWorld-v0",
        "tasks.train=arborl.tasks.textworld.suites:train_tasks",
        # the suite's first game (the other tests generate it): no new game to generate
        "+tasks.train_options={suite:textworld-coin,games:1,first_seed:0}",
        "tasks.eval_suite=textworld-coin",
        "tasks.eval_size=1",
        "rollout.group_size=2",
        "rollout.groups_per_step=1",
        "rollout.max_turns=3",
        "rollout.max_new_tokens=16",
        "rollout.max_context_tokens=2048",
        "run.steps=2",
        "run.eval_every=2",
        "run.checkpoint_every=2",
        "sft.steps=0",
        "run.time_budget_min=null",
        "async.mode=sync",
        f"run.dir={run}",
    ]
    res = subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", *args], capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [s for s in steps if s["phase"] == "rl"]
    assert [s["step"] for s in rl] == [1, 2]
    assert all(s["rollout/turns"] == 3 and s["rollout/infra_failures"] == 0 for s in rl), rl
    rows = pq.read_table(run / "trajectories" / "group-000000.parquet").to_pylist()
    assert {r["task_id"] for r in rows} == {"coin-0"} and all(r["truncation"] == "max_turns" for r in rows)
