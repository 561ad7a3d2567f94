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


def arborl(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ARBORL_SCIENCEWORLD_JVMS": "2"}
    return subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
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


#: Train variations whose own gold sequence, as the package generates it, does not solve the
#: task, with the score it ends at (checked below, so a package that fixes one is noticed). Each
#: fails the same way when the package replays it itself (docs/benchmarks.md).
INCOMPLETE_GOLD = {
    # the chocolate never freezes; waiting more does not help
    "scienceworld/freeze/11": 0.87,
    # the freezer leaves the substance liquid (mercury melts at -38.8 C) and the path then
    # focuses on the "above -10 C" box: the task fails, score -100, reward 0
    "scienceworld/measure-melting-point-known-substance/211": 0.0,
    "scienceworld/measure-melting-point-unknown-substance/10": 0.0,
    "scienceworld/measure-melting-point-unknown-substance/60": 0.0,
    # the path infers from its world's offspring that tall height is recessive in the pea plant
    # (Mendel's dominant trait) and focuses on that box: -100
    "scienceworld/mendelian-genetics-known-plant/14": 0.0,
    "scienceworld/mendelian-genetics-known-plant/40": 0.0,  # the same: its own replay ends at -100
    "scienceworld/mendelian-genetics-known-plant/7": 0.0,  # the same: the blue box, -100
    "scienceworld/mendelian-genetics-unknown-plant/12": 0.0,  # the same kind: it focuses on the wrong box
    "scienceworld/mendelian-genetics-unknown-plant/10": 0.0,  # the same: the blue box, -100
    "scienceworld/mendelian-genetics-unknown-plant/132": 0.0,  # the same: the green box, -100
    # the path's waits end before its world's apple grows: 50 after 105-113 moves
    "scienceworld/grow-fruit/2": 0.5,
    "scienceworld/grow-fruit/35": 0.5,
    "scienceworld/grow-fruit/37": 0.5,
    "scienceworld/grow-fruit/40": 0.5,
    "scienceworld/grow-fruit/41": 0.5,
}


def train_sample(per_type: int = 7) -> list[str]:
    """`per_type` train variations of each task type, spread over its list (first and last
    included), the one whose gold path is the type's longest (its step limit is the
    tightest: up to 797 actions, inclined-plane-friction-named-surfaces), and the pinned
    `INCOMPLETE_GOLD` ones: the whole split is 3592 variations, over an hour of JVM here."""
    from arborl.tasks.scienceworld.task import task_names
    from arborl.tasks.scienceworld.variations import variations

    ids = []
    for name in task_names():
        train, steps = variations()[name]["train"], variations()[name]["gold_steps"]
        n = len(train)
        picks = {train[i] for i in {(k * n) // (per_type - 1) for k in range(per_type - 1)} | {n - 1}}
        picks.add(max(train, key=lambda v: steps.get(str(v), 0)))
        picks |= {int(t.rsplit("/", 1)[1]) for t in INCOMPLETE_GOLD if t.split("/")[1] == name}
        ids += [f"scienceworld/{name}/{v}" for v in sorted(picks)]
    return ids


@pytest.mark.full
@pytest.mark.timeout(1800)
def test_gold_scores_a_sample_of_the_train_split_except_the_packages_incomplete_gold_paths(tmp_path):
    """About 11 minutes on two cores (mendelian-genetics' gold paths take 15-20 s each to make
    and 260 actions to play)."""
    tasks = train_sample()
    res = arborl(
        "eval", "suite=scienceworld-train", f"tasks=[{','.join(tasks)}]", "agent=gold",
        "concurrency=2", f"run.dir={tmp_path}", "report=false", timeout=1700,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    check_train_sample(tasks, tmp_path)


def check_train_sample(tasks: list[str], run_dir) -> None:
    from arborl.eval.result_store import read_results

    _, results = read_results(run_dir)
    assert sorted(r.instance_id for r in results) == sorted(tasks)
    assert [r for r in results if r.status != "done"] == []
    failed = {r.instance_id: round(r.score, 2) for r in results if not r.success}
    assert failed == {t: s for t, s in INCOMPLETE_GOLD.items() if t in tasks}


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
