"""Whose fault a dead sandbox is: the agent's (a failure, reward 0, trained on) or not (retried).

An agent that can make its sandbox die and have that counted as "infrastructure" abstains from
every task it would fail: the episode is dropped instead of scored 0. The line: a sandbox its
own limits killed (its memory cgroup OOM-killed it: the agent's commands filled it) or that its
processes starved is the agent's doing; a sandbox removed or killed from outside, or an engine
that went away, is not. Both sides on both backends.
"""

from __future__ import annotations

import asyncio
import os

import gymnasium
import pytest

import arborl.envs  # noqa: F401
from arborl.agents import Agent, AgentConfig
from arborl.envs import arelease, areset, astep
from arborl.envs.parsers import get_parser
from arborl.sandboxes import PoolConfig, SandboxPool
from arborl.tasks import CodeTask
from arborl.trainer.local.rollout import INFRA_FAILURES

P = get_parser("hermes")
TASK = CodeTask(
    id="fault-calc",
    problem_statement="`add(2, 3)` returns -1: make it return the sum.",
    repo_files={"calc.py": "def add(a, b):\n    return a - b\n"},
)
FILL = "dd if=/dev/zero of=/workspace/fill bs=1M count=3000"  # past the 1 GiB memory limit


def bash(command: str) -> str:
    return P.format_call("bash", {"command": command})


@pytest.fixture(params=["docker", "bwrap"])
async def pool(request):
    backend = request.getfixturevalue(f"{request.param}_backend")
    async with SandboxPool(backend, PoolConfig(max_size=2)) as p:
        yield p


async def _kill_from_outside(sb) -> None:
    if sb.backend.name == "docker":
        await asyncio.to_thread(sb.handle.remove, force=True)
    else:
        os.killpg(sb.handle[0].pid, 9)


async def test_filling_the_sandbox_is_the_agents_failure(pool):
    env = gymnasium.make("arborl/Code-v0", pool=pool)
    try:
        await areset(env, options={"task": TASK})
        _, reward, terminated, truncated, info = await astep(env, bash(FILL))
    finally:
        await arelease(env)
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["sandbox_fault"] == "agent" and info["truncated_by"] == "sandbox_crash", info
    assert info["truncated_by"] not in INFRA_FAILURES


async def test_a_sandbox_killed_from_outside_is_not_the_agents_failure(pool):
    env = gymnasium.make("arborl/Code-v0", pool=pool)
    try:
        await areset(env, options={"task": TASK})
        await _kill_from_outside(env.unwrapped.sandbox.raw)
        _, reward, _, truncated, info = await astep(env, bash("echo hi"))
    finally:
        await arelease(env)
    assert truncated and reward == 0.0
    assert info["sandbox_fault"] == "infra" and info["truncated_by"] == "sandbox_infra", info
    assert info["truncated_by"] in INFRA_FAILURES


def _script(*commands: str):
    replies = [bash(c) for c in commands]

    def policy(messages, info):
        return replies.pop(0) if replies else P.format_call("submit", {})

    return policy


@pytest.mark.parametrize("outside", [False, True], ids=["agent-fills-it", "killed-from-outside"])
async def test_training_keeps_the_agents_crash_at_reward_zero_and_drops_the_other(pool, tiny_model, outside):
    """What the trainer sees: the trajectory's truncation decides whether it is trained on."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    agent = Agent(None, tok, AgentConfig(max_turns=4, max_new_tokens=64))  # type: ignore[arg-type]
    env = gymnasium.make("arborl/Code-v0", pool=pool)
    kill = "sleep 5" if outside else FILL
    if outside:

        async def killer():
            while env.unwrapped._proxy is None:  # the episode's lease
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # inside the agent's `sleep`
            await _kill_from_outside(env.unwrapped.sandbox.raw)

        asyncio.get_running_loop().create_task(killer())
    ep = await agent.run_episode(env, TASK, demo=_script(kill, "echo after"))
    traj = ep.trajectory
    assert traj.outcome_reward == 0.0
    if outside:
        assert traj.truncation == "sandbox_infra" and traj.truncation in INFRA_FAILURES
    else:
        assert traj.truncation == "sandbox_crash" and traj.truncation not in INFRA_FAILURES
