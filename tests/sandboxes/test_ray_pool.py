"""RaySandboxPool on a real Ray cluster of 3 nodes (`ray.cluster_utils.Cluster`, one raylet
and object store per node, in this process's machine), each node on the bubblewrap backend.

Why this is faithful to sandboxes on other hosts: each node's actor runs in its own worker
process, placed by Ray on its node, and owns an ordinary `SandboxPool`; the channel to each
sandbox is a unix socket made by that process, and reset in place runs there. That is the
same code whether the backend is bubblewrap or Docker: only what starts the sandbox differs.
The harness reaches a node only through Ray actor calls, and a node removed from the cluster
dies as a host would (its raylet and workers are killed). What this cannot show: a network
between the hosts (latency, partitions), or a host's own Docker engine dying alone.
"""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass

import pytest
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from ray_cluster import NODE_ARGS, ray_cluster

from arborl.sandboxes import PoolConfig, Sandbox, SandboxCrashed, SandboxError, SandboxSpec
from arborl.sandboxes.owner import OWNER_RUN
from arborl.sandboxes.ray import RayPoolConfig, RaySandboxPool
from arborl.sandboxes.ray.sandbox import RemoteSandbox

# xdist_group: one Ray cluster at a time when the suite runs on several workers (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.bwrap, pytest.mark.timeout(180), pytest.mark.xdist_group("ray")]

PER_NODE = 3
SPEC = SandboxSpec(files={"/workspace/task.txt": "clean\n"})


@pytest.fixture(scope="module")
def cluster(bwrap_backend):
    with ray_cluster(3) as c:
        yield c


def make_pool() -> RaySandboxPool:
    return RaySandboxPool(
        RayPoolConfig(
            backend={"type": "bwrap"},
            pool=PoolConfig(max_size=PER_NODE, health_interval_s=0),
            revive_interval_s=0.5,
        )
    )


@dataclass
class Attempt:
    episode: int
    node: str
    sandbox: str
    began: float  # when its acquire began (time.monotonic)


async def episode(
    pool: RaySandboxPool, i: int, log: list[Attempt], errors: list[Exception], hold_s: float
) -> int:
    """One eval episode, retried on an infrastructure error as the eval runner does; returns
    the attempt that scored. The score is checked against hashlib, here, on the harness."""
    for attempt in range(1, 5):
        began = time.monotonic()
        try:
            async with pool.acquire(SPEC) as sb:
                log.append(Attempt(i, sb.node_id, sb.id, began))
                assert await sb.read_file("/workspace/task.txt") == b"clean\n"  # reset in place
                await sb.write_file("/workspace/task.txt", f"{i}\n")
                res = await sb.exec(
                    f"sleep {hold_s}; python3 -c 'import hashlib; "
                    'print(hashlib.sha256(open("task.txt", "rb").read()).hexdigest())\''
                )
                assert res.stdout.strip() == hashlib.sha256(f"{i}\n".encode()).hexdigest(), res.output
                return attempt
        except SandboxError as e:
            assert e.fault == "infra", f"episode {i} was failed on the agent: {e}"
            errors.append(e)
    raise AssertionError(f"episode {i} was lost after 4 attempts: {errors[-1]}")


async def run_eval(
    pool: RaySandboxPool, n: int, log: list[Attempt], errors: list[Exception], hold_s: float
) -> list[int]:
    room = asyncio.Semaphore(PER_NODE * len(pool.nodes))

    async def one(i: int) -> int:
        async with room:
            return await episode(pool, i, log, errors, hold_s)

    return await asyncio.gather(*(one(i) for i in range(n)))


def run_sandboxes(backend, run_id: str) -> list[str]:
    return [i.id for i in backend.list_sandboxes() if i.labels.get(OWNER_RUN) == run_id]


async def test_an_eval_of_32_episodes_spreads_over_the_nodes_and_leaves_nothing(cluster, bwrap_backend):
    log: list[Attempt] = []
    errors: list[Exception] = []
    pool = make_pool()
    async with pool:
        assert len(pool.nodes) == 3
        attempts = await run_eval(pool, 32, log, errors, hold_s=0.2)
        await pool.drain()
        assert run_sandboxes(bwrap_backend, pool.id)  # they are there, labelled with the run
    assert attempts == [1] * 32 and errors == []
    per_node = Counter(a.node for a in log)
    assert set(per_node) == set(pool.nodes) and min(per_node.values()) >= 4, per_node
    # warm sandboxes reused after a reset in place on their node, never more than the nodes hold
    assert len({a.sandbox for a in log}) <= 3 * PER_NODE
    assert run_sandboxes(bwrap_backend, pool.id) == []


async def checkout_nodes(n: int) -> tuple[str, list[str]]:
    """The node this process runs on, and where `n` sandboxes taken at once were placed."""
    async with make_pool() as pool:
        sbs = [await pool.checkout(SPEC) for _ in range(n)]
        for sb in sbs:
            pool.checkin(sb)
        return pool.own_node or "", [sb.node_id for sb in sbs]


async def test_acquires_prefer_the_callers_own_node_while_it_has_room(cluster):
    """A verl agent-loop worker (any Ray worker process) gets the sandboxes of its own node:
    its calls never leave the host. Most room would spread these over the three nodes."""
    head = cluster.head_node.node_id
    own, placed = await checkout_nodes(PER_NODE + 1)  # this driver runs on the head node
    assert own == head and placed[:PER_NODE] == [head] * PER_NODE, placed
    assert placed[PER_NODE] != head  # full: the next goes to another node

    worker = next(iter(cluster.worker_nodes)).node_id

    class Caller:  # a Ray worker process on `worker`, as verl's AgentLoopWorker is on its node
        async def checkout_nodes(self, n: int) -> tuple[str, list[str]]:
            return ray.get_runtime_context().get_node_id(), (await checkout_nodes(n))[1]

    here = sys.modules[__name__]  # the worker cannot import this test module: send it along
    ray.cloudpickle.register_pickle_by_value(here)
    try:
        caller = (
            ray.remote(Caller)
            .options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(worker, soft=False))
            .remote()
        )
        own, placed = await caller.checkout_nodes.remote(PER_NODE)
        ray.kill(caller)
    finally:
        ray.cloudpickle.unregister_pickle_by_value(here)
    assert own == worker and placed == [worker] * PER_NODE, placed


async def test_a_remote_sandbox_is_healthy_as_a_local_one_is(cluster):
    """One `healthy()` (a ping answered within 5 s) serves both kinds of sandbox."""
    assert RemoteSandbox.healthy is Sandbox.healthy
    async with make_pool() as pool, pool.acquire(SPEC) as sb:
        assert await sb.healthy()


async def test_a_node_lost_mid_eval_loses_no_episode_and_its_successor_is_used(cluster, bwrap_backend):
    victim = next(iter(cluster.worker_nodes))
    log: list[Attempt] = []
    errors: list[Exception] = []
    pool = make_pool()

    async def remove_victim_when_busy() -> None:
        while sum(a.node == victim.node_id for a in log) < PER_NODE:
            await asyncio.sleep(0.05)
        await asyncio.to_thread(cluster.remove_node, victim, False)  # the host dies

    async with pool:
        assert victim.node_id in pool.nodes
        attempts, _ = await asyncio.gather(
            run_eval(pool, 32, log, errors, hold_s=1.0), remove_victim_when_busy()
        )
        assert len(attempts) == 32  # every episode scored (a wrong or lost one fails above)
        assert errors and all(isinstance(e, SandboxCrashed) and e.fault == "infra" for e in errors), errors
        assert max(attempts) > 1  # episodes caught on the lost node were retried elsewhere
        lost_at = min(t for node, t in pool.lost if node == victim.node_id)
        assert not [a for a in log if a.node == victim.node_id and a.began > lost_at]

        fresh = cluster.add_node(**NODE_ARGS)  # Ray starts a node from the main thread only
        deadline = time.monotonic() + 60
        while not (fresh.node_id in pool.nodes and pool.nodes[fresh.node_id].up):
            assert time.monotonic() < deadline, "the new node's actor never came up"
            await asyncio.sleep(0.2)
        later: list[Attempt] = []
        await run_eval(pool, 9, later, errors, hold_s=0.5)
        assert fresh.node_id in {a.node for a in later}
    assert run_sandboxes(bwrap_backend, pool.id) == []


DRIVER = """
import asyncio, sys
import ray
from arborl.sandboxes import PoolConfig, SandboxSpec
from arborl.sandboxes.ray import RayPoolConfig, RaySandboxPool

async def main():
    ray.init(address=sys.argv[1], log_to_driver=False)
    pool = RaySandboxPool(RayPoolConfig(
        backend={"type": sys.argv[3]}, pool=PoolConfig(max_size=2, health_interval_s=0), run_id=sys.argv[2]))
    held = [await pool.checkout(SandboxSpec()) for _ in range(4)]
    print("holding", len({sb.node_id for sb in held}), flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


@pytest.mark.parametrize("kind", ["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def test_a_driver_killed_mid_run_leaves_no_sandbox_on_any_node(cluster, kind, request, tmp_path):
    """A trainer that crashes (SIGKILL: nothing of it runs again) never closes its pool. Ray
    ends the node actors it owned; each actor's watchdog then removes that node's sandboxes:
    Docker containers outlive their creator, and a bubblewrap sandbox leaves its directory,
    cgroup and uid behind (its processes die with the actor)."""
    backend = request.getfixturevalue(f"{kind}_backend")
    run_id = f"killed-driver-{kind}-{time.time_ns()}"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    driver = subprocess.Popen(
        [sys.executable, str(script), cluster.address, run_id, kind], stdout=subprocess.PIPE, text=True
    )
    try:
        line = driver.stdout.readline() if driver.stdout else ""
        assert line.startswith("holding"), f"the driver did not start: {line!r} (rc {driver.poll()})"
        assert int(line.split()[1]) >= 2  # spread over nodes (two sandboxes a node)
        assert len(run_sandboxes(backend, run_id)) >= 4
    finally:
        driver.kill()
        driver.wait()
    deadline = time.monotonic() + 60
    while left := run_sandboxes(backend, run_id):
        assert time.monotonic() < deadline, f"left behind by the killed driver's actors: {left}"
        time.sleep(0.5)
