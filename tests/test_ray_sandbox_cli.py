"""`sandbox=ray` through the real CLI: `arborl eval` and `arborl train` run their episodes on
the sandboxes of a Ray cluster of 2 nodes (`ray_cluster`, bubblewrap on each node;
tests/sandboxes/test_ray_pool.py says why that is faithful), joined by address as a driver on
another host would. Where they ran is read back from Ray's own actor table: a `SandboxNode`
actor on each node, made by the CLI's process (not by this one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray
from ray_cluster import ray_cluster
from train_cli import train_steps

from arborl.envs.code import DEFAULT_TASK
from arborl.sandboxes.owner import OWNER_RUN
from arborl.tasks import CodeTask

# xdist_group: one Ray cluster at a time when the suite runs on several workers (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.bwrap, pytest.mark.timeout(900), pytest.mark.xdist_group("ray")]

CMD = [sys.executable, "-m", "arborl.cli.main"]


@pytest.fixture(scope="module")
def cluster(bwrap_backend):
    with ray_cluster(2) as c:
        yield c


def ray_sandbox(cluster, run_id: str) -> list[str]:
    """`sandbox=ray` on this cluster, the nodes on bubblewrap, 2 sandboxes a node, the
    sandboxes labelled with `run_id`."""
    return [
        "sandbox=ray",
        f"sandbox.address={cluster.address}",
        "sandbox.backend.type=bwrap",
        f"+sandbox.run_id={run_id}",
        "pool.max_size=2",
    ]


def left_behind(backend, run_id: str) -> list[str]:
    return [i.id for i in backend.list_sandboxes() if i.labels.get(OWNER_RUN) == run_id]


def sandbox_node_actors() -> dict[str, str]:
    """Every `SandboxNode` actor the cluster has had: actor id -> the node it ran on."""
    from ray._private.state import state

    table = state.actor_table(None)
    return {
        aid: info["Address"]["NodeID"]
        for aid, info in table.items()
        if info.get("ActorClassName", "").endswith("SandboxNode")
    }


def test_eval_runs_its_episodes_on_the_ray_nodes(cluster, tmp_path, bwrap_backend):
    before = set(sandbox_node_actors())
    run = tmp_path / "run"
    res = subprocess.run(
        [*CMD, "eval", "suite=swe-mini", "agent=gold", "limit=4", "concurrency=4", "swe.images=off",
         f"run.dir={run}", *ray_sandbox(cluster, "cli-eval")],
        capture_output=True, text=True, timeout=600, env={**os.environ, "RAY_ADDRESS": ""},
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["samples"] == 4 and summary["infra_errors"] == 0, summary
    assert summary["resolved"] == 4, summary  # the gold patches, graded on the nodes
    made = {a: n for a, n in sandbox_node_actors().items() if a not in before}
    assert set(made.values()) == {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert left_behind(bwrap_backend, "cli-eval") == []


def code_tasks(n: int, seed: int) -> list[CodeTask]:
    """`arborl train`'s task stream for the test: the Code env's default task (a bug in
    calc.py), `n` times (swe-mini's environments need a writable site-packages, which
    bubblewrap's read-only host root does not give)."""
    return [DEFAULT_TASK.model_copy(update={"id": f"calc-{seed}-{i}"}) for i in range(n)]


def test_train_runs_its_rollouts_on_the_ray_nodes(cluster, tmp_path, bwrap_backend, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))  # `code_tasks` for the CLI
    before = set(sandbox_node_actors())
    rl = train_steps(
        tmp_path / "run",
        "arborl/Code-v0",
        "tasks.train=test_ray_sandbox_cli:code_tasks",
        "tasks.eval_suite=swe-mini",
        "tasks.eval_size=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=16",
        *ray_sandbox(cluster, "cli-train"),
        steps=1,
    )
    assert rl[0]["rollout/infra_failures"] == 0
    made = {a: n for a, n in sandbox_node_actors().items() if a not in before}
    assert made, "no SandboxNode actor: the rollouts did not use the Ray cluster"
    assert set(made.values()) == {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert left_behind(bwrap_backend, "cli-train") == []


@pytest.mark.docker
def test_eval_of_swe_tasks_runs_them_on_instance_images_made_on_the_nodes(cluster, tmp_path, docker_backend):
    """`swe.images=auto` with sandbox=ray and Docker on the nodes: each node's actor makes the
    instance images on its own engine (`RaySandboxPool.on_each_node`), and the episodes' containers
    run on them. The containers are watched while the eval runs, by the run's label."""
    run = tmp_path / "run"
    label = f"{OWNER_RUN}=cli-swe"
    args = ["suite=swe-mini", "agent=gold", "limit=2", "concurrency=2", "swe.images=auto", f"run.dir={run}"]
    args += [*ray_sandbox(cluster, "cli-swe"), "sandbox.backend.type=docker"]
    images: set[str] = set()
    with subprocess.Popen(
        [*CMD, "eval", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        while proc.poll() is None:
            listed = docker_backend.client.containers.list(sparse=True, filters={"label": label})
            images |= {c.attrs["Image"] for c in listed}
            time.sleep(0.2)
        out = proc.stdout.read() if proc.stdout else ""
    assert proc.returncode == 0, out[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["resolved"] == 2 and summary["infra_errors"] == 0, summary
    assert images and all(tag.startswith("arborl/swe:") for tag in images), images
    assert docker_backend.client.containers.list(all=True, filters={"label": label}) == []


async def test_nodes_that_would_run_a_swe_task_on_different_images_are_refused():
    """With `backend: auto`, one node may be on Docker (instance images) and another on
    bubblewrap (the base image): the same task would differ by where it lands, so the eval
    stops before it starts, saying what to do."""
    from arborl.envs.code.swe_grading import images_on_each_node
    from arborl.sandboxes import SandboxUnavailable

    task = DEFAULT_TASK.model_copy(update={"id": "swe-1"})

    class TwoNodes:  # what RaySandboxPool.on_each_node returns: each node's own build
        async def on_each_node(self, fn, tasks, repos_dirs):
            return {"docker-node": [task.model_copy(update={"image": "arborl/swe:1"})], "bwrap-node": tasks}

    with pytest.raises(SandboxUnavailable, match=r"same backend.*swe\.images=off"):
        await images_on_each_node(TwoNodes(), [task], [])
