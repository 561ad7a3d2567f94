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


def eval_on_docker_nodes(cluster, docker_backend, args: list[str], run_id: str) -> set[str]:
    """`arborl eval *args` with sandbox=ray and Docker on the nodes; the repositories of the
    images its containers ran on (watched while it runs, by the run's label), none left after."""
    label = f"{OWNER_RUN}={run_id}"
    images: set[str] = set()
    with subprocess.Popen(
        [*CMD, "eval", *args, *ray_sandbox(cluster, run_id), "sandbox.backend.type=docker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        while proc.poll() is None:
            listed = docker_backend.client.containers.list(sparse=True, filters={"label": label})
            images |= {c.attrs["Image"] for c in listed}
            time.sleep(0.2)
        out = proc.stdout.read() if proc.stdout else ""
    assert proc.returncode == 0, out[-3000:]
    assert images, "no container of the run was seen"
    assert docker_backend.client.containers.list(all=True, filters={"label": label}) == []
    return {tag.split(":")[0] for tag in images}


@pytest.mark.docker
def test_eval_of_swe_tasks_runs_them_on_instance_images_made_on_the_nodes(cluster, tmp_path, docker_backend):
    """`swe.images=auto` with sandbox=ray and Docker on the nodes: each node's actor makes the
    instance images on its own engine (`RaySandboxPool.on_each_node`), and the episodes' containers
    run on them. The containers are watched while the eval runs, by the run's label."""
    run = tmp_path / "run"
    args = ["suite=swe-mini", "agent=gold", "limit=2", "concurrency=2", "swe.images=auto", f"run.dir={run}"]
    assert eval_on_docker_nodes(cluster, docker_backend, args, "cli-swe") <= {"arborl/swe"}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["resolved"] == 2 and summary["infra_errors"] == 0, summary


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


@pytest.mark.docker
@pytest.mark.full  # ~60 s; CI runs the env-level test below, the same build on the nodes
def test_eval_of_harbor_tasks_builds_their_images_on_the_nodes(cluster, tmp_path, docker_backend):
    """`arborl eval suite=FOLDER` on Harbor tasks with sandbox=ray and Docker on the nodes:
    each node's actor builds the tasks' images on its own engine (`RaySandboxPool.on_each_node`,
    the nodes agreeing on every tag), and the gold runs pass on them."""
    run = tmp_path / "run"
    suite = Path(__file__).parent / "data" / "harbor"
    args = [f"suite={suite}", "agent=gold", "limit=2", "concurrency=2", f"run.dir={run}"]
    assert eval_on_docker_nodes(cluster, docker_backend, args, "cli-harbor") <= {"arborl/harbor"}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["resolved"] == 2 and summary["infra_errors"] == 0, summary


@pytest.mark.docker
async def test_a_harbor_env_on_a_ray_pool_builds_its_image_on_the_nodes(cluster, docker_backend):
    """What `arborl train` does with sandbox=ray (no eval hook builds first): the env's reset
    builds the task's image on every node's engine, and the episode runs and is graded on a
    node. The fix scores 1."""
    import gymnasium

    import arborl.envs  # noqa: F401 - registers arborl/Harbor-v0
    from arborl.envs import arelease, areset, astep
    from arborl.envs.parsers import get_parser
    from arborl.sandboxes import PoolConfig
    from arborl.sandboxes.ray import RayPoolConfig, RaySandboxPool
    from arborl.tasks.harbor import load_task

    task = load_task(Path(__file__).parent / "data" / "harbor-uv" / "hello-uv")
    hermes = get_parser("hermes")
    pool = RaySandboxPool(
        RayPoolConfig(
            backend={"type": "docker"}, pool=PoolConfig(max_size=1, health_interval_s=0), run_id="env-harbor"
        )
    )
    env = gymnasium.make("arborl/Harbor-v0", pool=pool)
    try:
        await areset(env, options={"task": task})
        assert env.unwrapped.sandbox.raw.node_id in {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        fix = hermes.format_call("bash", {"command": "echo 'Hello from uv!' > /app/greeting.txt"})
        await astep(env, fix)
        _, reward, terminated, _, info = await astep(env, hermes.format_call("submit", {}))
        assert terminated and reward == 1.0, info.get("verifier")
    finally:
        await arelease(env)
        env.close()
        await pool.close()
