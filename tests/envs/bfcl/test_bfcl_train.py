"""`arborl train` on `arborl/BFCL-v0`: a couple of RL steps of the tiny model on bfcl-simple
run end to end (episodes scored by bfcl-eval's checker, no infrastructure failure). The
untrained tiny model makes no valid call, so its groups are uniform (all 0) and GRPO has no
gradient to take: this checks the plumbing, not learning."""

from __future__ import annotations

import pytest
from train_cli import train_steps


@pytest.mark.slow
def test_two_rl_steps_on_bfcl(tmp_path):
    rl = train_steps(
        tmp_path / "bfcl",
        "arborl/BFCL-v0",
        "tasks.train=suite:bfcl-simple",
        "tasks.eval_suite=bfcl-simple",
        "tasks.eval_size=2",
        "rollout.groups_per_step=2",
        "rollout.max_turns=1",
        "rollout.max_new_tokens=16",
        "rollout.max_context_tokens=2048",
    )
    assert all("rollout/reward" in e for e in rl), rl
