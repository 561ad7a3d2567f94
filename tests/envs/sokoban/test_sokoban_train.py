"""`arborl train` runs RL steps on arborl/Sokoban-v0 with the sokoban-6x6 training stream."""

from __future__ import annotations

import pytest
from train_cli import train_steps


@pytest.mark.slow
def test_arborl_train_runs_rl_steps_on_sokoban(tmp_path):
    rl = train_steps(
        tmp_path / "run",
        "arborl/Sokoban-v0",
        "tasks.train=arborl.tasks.sokoban.suite:generate_train_tasks",
        "tasks.train_size=64",
        "tasks.eval_suite=sokoban-6x6",
        "tasks.eval_size=2",
        "rollout.groups_per_step=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=8",
        "rollout.max_context_tokens=4096",  # verl-agent's prompt is ~700 tokens a turn
    )
    # a tiny random model writes no <action> tags: verl-agent's -0.1 (no move) - 0.1 (invalid)
    assert all(e["rollout/reward"] == pytest.approx(-0.2 * e["rollout/turns"]) for e in rl)
