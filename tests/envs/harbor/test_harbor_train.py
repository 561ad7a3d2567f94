"""`arborl train` on a Harbor task folder: two RL steps of the tiny model, every episode in a
sandbox of its task's image and graded by the task's own tests (the untrained model writes no
tool call, so every reward is 0: this checks the plumbing, not learning)."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_cli import train_steps

from arborl.trainer.local.trajectory_store import TrajectoryStore

EXAMPLES = Path(__file__).parents[2] / "data" / "harbor"


@pytest.mark.slow
@pytest.mark.docker
def test_two_rl_steps_on_a_harbor_folder(tmp_path, docker_backend):
    run = tmp_path / "harbor"
    rl = train_steps(
        run,
        "arborl/Harbor-v0",
        f"tasks.train=suite:{EXAMPLES}",
        f"tasks.eval_suite={EXAMPLES}",
        "tasks.eval_size=1",
        "async.mode=sync",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=16",
        "rollout.max_context_tokens=4096",
    )
    assert all(e["rollout/reward"] == 0.0 for e in rl), rl
    store = TrajectoryStore(run / "trajectories")
    trajs = [t for i in store.indices() for t in store.get(i)]
    assert len(trajs) >= 4 and {t.task_id for t in trajs} <= {p.name for p in EXAMPLES.iterdir()}
    # graded at the turn budget's end: the last turn carries the tests' reward (0 here)
    assert all(t.truncation == "max_turns" and t.turns[-1].reward == 0.0 for t in trajs), [
        t.truncation for t in trajs
    ]
