"""ScienceWorld through arborl's own entry points: `arborl eval` scores the package's gold
sequences 100 % and the empty policy 0 % on a few variations of a few task types, and
`arborl train` runs RL steps on arborl/ScienceWorld-v0 with the tiny model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from arborl_require import unavailable
from train_cli import train_steps

pytestmark = pytest.mark.slow
#: Two variations of two task types with short gold sequences (one `arborl eval` per agent
#: over the aggregate suite keeps CI small: each run starts its JVMs once).
TASKS = (
    "scienceworld/find-living-thing/225",
    "scienceworld/find-living-thing/226",
    "scienceworld/lifespan-longest-lived/93",
    "scienceworld/lifespan-longest-lived/94",
)


@pytest.fixture(autouse=True)
def _java():
    if shutil.which("java") is None:
        unavailable("java", "no Java runtime: apt-get install default-jre-headless (scripts/setup.sh does)")


def arborl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ARBORL_SCIENCEWORLD_JVMS": "2"}
    return subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", *args], capture_output=True, text=True, timeout=900, env=env
    )


def test_gold_scores_everything_and_empty_nothing(tmp_path):
    for agent, expected in (("gold", 1.0), ("empty", 0.0)):
        run = tmp_path / agent
        res = arborl(
            "eval",
            "suite=scienceworld",
            f"tasks=[{','.join(TASKS)}]",
            f"agent={agent}",
            "max_turns=30",  # the gold sequences here take at most 16 actions
            "concurrency=2",
            f"run.dir={run}",
            "report=false",
        )
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        summary = json.loads((run / "summary.json").read_text())
        assert summary["resolved_rate"] == expected and summary["samples"] == len(TASKS), (agent, summary)
        assert summary["infra_errors"] == 0, summary


def test_a_couple_of_rl_steps_on_scienceworld(tmp_path):
    train_steps(
        tmp_path / "train",
        "arborl/ScienceWorld-v0",
        "tasks.train=suite:scienceworld-find-living-thing",
        "tasks.eval_suite=scienceworld-find-living-thing",
        "tasks.eval_size=1",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=8",
        "rollout.max_context_tokens=4096",
        "run.checkpoint_every=2",
        "async.mode=sync",
    )
