"""An env takes a `RaySandboxPool` as it takes a `SandboxPool`: real code episodes on the
sandboxes of a Ray cluster of 2 nodes (bubblewrap on each; tests/sandboxes/test_ray_pool.py
says why that is faithful), scored by the env's own verifier."""

from __future__ import annotations

import asyncio
from collections import Counter

import gymnasium
import pytest
from ray_cluster import ray_cluster

import arborl.envs  # noqa: F401
from arborl.envs.code import DEFAULT_TASK
from arborl.envs.episodes import run_episodes
from arborl.envs.parsers import get_parser
from arborl.sandboxes import PoolConfig
from arborl.sandboxes.ray import RayPoolConfig, RaySandboxPool

P = get_parser("hermes")


@pytest.fixture(scope="module")
def cluster(bwrap_backend):
    with ray_cluster(2) as c:
        yield c


async def solve(messages: list[dict], info: dict) -> str:
    """The default code task's fix, then submit."""
    if not any(m["role"] == "tool" for m in messages):
        return P.format_call(
            "str_replace_editor",
            {"command": "str_replace", "path": "calc.py", "old_str": "a - b", "new_str": "a + b"},
        )
    return P.format_call("submit", {})


def test_configure_ray_makes_the_envs_default_pool_a_ray_pool(monkeypatch):
    """`configure(backend={"type": "ray", ...})`: envs without `pool=` use the Ray pool, with
    the configured pool settings as each node's."""
    from arborl.envs import event_loop

    monkeypatch.setitem(
        event_loop._DEFAULTS, "backend", {"type": "ray", "node_resource": "gpu_and_sandboxes"}
    )
    monkeypatch.setitem(event_loop._DEFAULTS, "pool", PoolConfig(max_size=5))
    loop = event_loop.EnvLoop()
    try:
        pool = loop.pool_for()
        assert isinstance(pool, RaySandboxPool) and loop.pool_for() is pool
        assert (pool.config.node_resource, pool.config.pool.max_size) == ("gpu_and_sandboxes", 5)
    finally:
        loop.shutdown()


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.timeout(180)
@pytest.mark.xdist_group("ray")  # one Ray cluster at a time (tests/conftest.py)
async def test_code_episodes_run_and_score_on_the_nodes(cluster):
    cfg = RayPoolConfig(backend={"type": "bwrap"}, pool=PoolConfig(max_size=3, health_interval_s=0))
    async with RaySandboxPool(cfg) as pool:
        placed: Counter[str] = Counter()
        checkout = pool.checkout

        async def counted(*args, **kwargs):
            sb = await checkout(*args, **kwargs)
            placed[sb.node_id] += 1
            return sb

        pool.checkout = counted  # type: ignore[method-assign]
        envs = [gymnasium.make("arborl/Code-v0", pool=pool) for _ in range(4)]
        tasks = [DEFAULT_TASK.model_copy(update={"id": f"t{i}"}) for i in range(8)]
        episodes = await run_episodes(envs, solve, tasks, max_turns=5)
        assert [e.task_id for e in episodes] == [f"t{i}" for i in range(8)]
        failed = [e for e in episodes if not (e.total_reward == 1.0 and e.terminated and not e.error)]
        assert not failed, [
            (e.task_id, e.error, e.infos[-1].get("verifier"), e.infos[-1].get("model_patch")) for e in failed
        ]
        await asyncio.gather(*(e.unwrapped.aclose() for e in envs))
        assert set(placed) == set(pool.nodes)  # both nodes served episodes
        assert pool.stats()["in_use"] == 0
