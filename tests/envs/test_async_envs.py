"""The async twin, many envs on one event loop, the runner, and Gymnasium's vector envs."""

from __future__ import annotations

import asyncio
import time

import gymnasium
import pytest

from arborl.envs.code import DEFAULT_TASK
from arborl.envs.episodes import run_episodes, run_episodes_sync
from arborl.envs.parsers import get_parser
from arborl.sandboxes import PoolConfig, SandboxPool
from arborl.tasks import ToolTask

pytestmark = pytest.mark.docker
P = get_parser("hermes")


def call(name: str, **args) -> str:
    return P.format_call(name, args)


async def test_async_twin_from_another_event_loop(env_backend, leased):
    """A pytest-asyncio loop is not the runtime's: calls hop to where the pool lives."""
    env = gymnasium.make("arborl/Code-v0", backend=env_backend)
    obs, info = await env.areset(seed=1)
    assert obs[1]["role"] == "user" and info["turn"] == 0
    obs, _reward, _terminated, _truncated, info = await env.astep(call("bash", command="echo async"))
    assert obs[0]["content"].startswith("async") and info["turn"] == 1
    await env.aclose()
    assert leased() == 0


async def test_envs_step_concurrently_on_one_loop(env_backend):
    envs = [gymnasium.make("arborl/Code-v0", backend=env_backend) for _ in range(4)]
    await asyncio.gather(*(e.areset() for e in envs))
    start = time.perf_counter()
    results = await asyncio.gather(*(e.astep(call("bash", command="sleep 1; echo done")) for e in envs))
    elapsed = time.perf_counter() - start
    assert all(r[0][0]["content"].startswith("done") for r in results)
    assert elapsed < 2.5, f"4 one-second steps took {elapsed:.1f}s: they did not overlap"
    await asyncio.gather(*(e.aclose() for e in envs))


async def test_a_pool_of_the_callers_own_loop(env_backend):
    """With `pool=`, the env runs on the caller's loop, with the caller's pool."""
    async with SandboxPool(env_backend, PoolConfig(max_size=1)) as pool:
        env = gymnasium.make("arborl/Code-v0", pool=pool)
        for _ in range(2):  # the second episode reuses the sandbox, reset in place
            await env.areset()
            _obs, reward, terminated, *_ = await env.astep(call("submit"))
            assert terminated and reward == 0.0
        await env.aclose()
        assert pool.stats()["in_use"] == 0 and pool.stats()["alive"] == 1
        await pool.drain()  # SandboxPool.close() drops sandboxes still being reset


async def solve(messages: list[dict], info: dict) -> str:
    """A scripted policy for the default code task: fix, then submit."""
    await asyncio.sleep(0.01)
    if not any(m["role"] == "tool" for m in messages):
        return call(
            "str_replace_editor", command="str_replace", path="calc.py", old_str="a - b", new_str="a + b"
        )
    return call("submit")


async def test_runner_runs_more_tasks_than_sandboxes(env_backend):
    async with SandboxPool(env_backend, PoolConfig(max_size=3)) as pool:
        envs = [gymnasium.make("arborl/Code-v0", pool=pool) for _ in range(3)]
        tasks = [DEFAULT_TASK.model_copy(update={"id": f"t{i}"}) for i in range(7)]
        episodes = await run_episodes(envs, solve, tasks, max_turns=5)
        assert [e.task_id for e in episodes] == [f"t{i}" for i in range(7)]
        assert all(e.total_reward == 1.0 and e.terminated and e.turns == 2 and not e.error for e in episodes)
        assert episodes[0].messages[-1] == {"role": "tool", "content": "Submitted. The verifier passed."}
        assert pool.stats()["in_use"] == 0 and pool.stats()["alive"] <= 3
        await pool.drain()  # SandboxPool.close() drops sandboxes still being reset


def test_runner_survives_policy_errors_and_budgets(env_backend, leased):
    def policy(messages, info):
        if "boom" in messages[1]["content"]:
            raise ConnectionError("model server went away")
        return call("bash", command="true")

    tasks = [{"id": "boom", "question": "boom", "builtin_tools": []}, {"id": "ok", "question": "fine"}]
    envs = [gymnasium.make("arborl/Tool-v0", backend=env_backend) for _ in range(2)]
    boom, ok = run_episodes_sync(envs, policy, [ToolTask(**t) for t in tasks], max_turns=3)
    assert boom.error == "ConnectionError: model server went away" and boom.truncated
    assert ok.error is None and ok.truncated and ok.turns == 3
    assert ok.infos[-1]["truncated_by"] == "runner_max_turns"
    assert leased() == 0


def test_sync_vector_env(env_backend):
    envs = gymnasium.vector.SyncVectorEnv(
        [lambda: gymnasium.make("arborl/Code-v0", backend=env_backend) for _ in range(2)]
    )
    obs, info = envs.reset(seed=0)
    assert len(obs) == 2 and obs[0][1]["role"] == "user"
    obs, _, terminated, _, info = envs.step((call("bash", command="echo a"), call("submit")))
    assert obs[0][0]["content"].startswith("a") and list(terminated) == [False, True]
    assert list(info["turn"]) == [1, 1]
    obs, _reward, terminated, _truncated, info = envs.step((call("submit"), "ignored: autoreset"))
    assert terminated[0] and obs[1][1]["role"] == "user"  # env 1 was reset (next-step autoreset)
    envs.close()


def test_async_vector_env_in_subprocesses():
    """Each worker process makes its own runtime (after fork); FACTS: shared_memory=False."""
    task = {"id": "v", "question": "2+2?", "answer": 4, "verifier": "numeric", "builtin_tools": []}
    envs = gymnasium.vector.AsyncVectorEnv(
        [lambda: gymnasium.make("arborl/Tool-v0") for _ in range(2)], shared_memory=False
    )
    try:
        obs, _ = envs.reset(options={"task": task})
        assert obs[0][1]["content"] == "2+2?"
        obs, reward, terminated, _truncated, _info = envs.step(("<answer>4</answer>", "5"))
        assert list(reward) == [1.0, 0.0] and all(terminated)
    finally:
        envs.close()
