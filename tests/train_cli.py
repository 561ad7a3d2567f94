"""`arborl train` for a couple of RL steps on one env, as the envs' training smoke tests run it:
the tiny model, no warm start, no time budget, small groups. Returns the RL steps' metrics
after checking the run ended well and ran exactly `steps` steps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

DEFAULTS = (
    "sft.steps=0",
    "model.tiny={}",
    "run.time_budget_min=null",
    "run.eval_every=100",
    "run.checkpoint_every=100",
    "rollout.group_size=2",
    "rollout.groups_per_step=1",
)


def train_steps(run: Path, env_id: str, *overrides: str, steps: int = 2) -> list[dict[str, Any]]:
    given = [*DEFAULTS, f"rollout.env_id={env_id}", f"run.steps={steps}", *overrides, f"run.dir={run}"]
    args = list({a.split("=", 1)[0]: a for a in given}.values())  # a test's own value wins over a default
    res = subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", "train", *args], capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [e for e in events if e.get("phase") == "rl"]
    assert [e["step"] for e in rl] == list(range(1, steps + 1)), events
    assert all(e["rollout/infra_failures"] == 0 for e in rl), rl
    return rl
