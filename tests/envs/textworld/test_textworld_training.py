"""`arborl train` on `arborl/TextWorld-v0`: a couple of RL steps of the tiny model, end to end."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from train_cli import train_steps


@pytest.mark.slow
def test_arborl_train_runs_rl_steps_on_textworld(tmp_path):
    run = tmp_path / "run"
    rl = train_steps(
        run,
        "arborl/TextWorld-v0",
        "tasks.train=arborl.tasks.textworld.suites:train_tasks",
        # the suite's first game (the other tests generate it): no new game to generate
        "+tasks.train_options={suite:textworld-coin,games:1,first_seed:0}",
        "tasks.eval_suite=textworld-coin",
        "tasks.eval_size=1",
        "rollout.max_turns=3",
        "rollout.max_new_tokens=16",
        "rollout.max_context_tokens=2048",
        "async.mode=sync",
    )
    assert all(s["rollout/turns"] == 3 for s in rl), rl
    rows = pq.read_table(run / "trajectories" / "group-000000.parquet").to_pylist()
    assert {r["task_id"] for r in rows} == {"coin-0"} and all(r["truncation"] == "max_turns" for r in rows)
