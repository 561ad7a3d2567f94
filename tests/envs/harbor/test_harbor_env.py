"""arborl/Harbor-v0's episode: the agent's time limit, and the backend it needs."""

from __future__ import annotations

import shutil
from pathlib import Path

import gymnasium
import pytest

import arborl.envs  # noqa: F401 - registers arborl/Harbor-v0
from arborl.envs import arelease, areset, astep
from arborl.envs.benchmarks import InfraError
from arborl.envs.parsers import get_parser
from arborl.sandboxes import PoolConfig, SandboxPool
from arborl.tasks.harbor import load_task

EXAMPLES = Path(__file__).parents[2] / "data" / "harbor"
P = get_parser("hermes")


@pytest.mark.docker
async def test_past_the_agents_time_limit_the_work_is_graded_as_it_is(tmp_path, docker_backend):
    folder = tmp_path / "edit-config"
    shutil.copytree(EXAMPLES / "edit-config", folder)
    toml = (folder / "task.toml").read_text().replace("timeout_sec = 300.0", "timeout_sec = 3.0")
    (folder / "task.toml").write_text(toml)
    task = load_task(folder)
    assert task.agent_timeout_s == 3.0
    async with SandboxPool(docker_backend, PoolConfig(max_size=1)) as pool:
        env = gymnasium.make("arborl/Harbor-v0", pool=pool)
        try:
            await areset(env, options={"task": task})
            # a command never runs past the time that is left
            obs, _, terminated, _, _ = await astep(
                env, P.format_call("bash", {"command": "sleep 30", "timeout": 30})
            )
            assert not terminated and "timed out" in obs[0]["content"]
            _, reward, terminated, truncated, info = await astep(
                env, P.format_call("bash", {"command": "true"})
            )
            assert truncated and not terminated and reward == 0.0
            assert info["truncated_by"] == "agent_timeout" and info["verifier"]["graded"]
        finally:
            await arelease(env)
            env.close()


@pytest.mark.bwrap
async def test_a_backend_without_images_is_an_infrastructure_error(bwrap_backend):
    async with SandboxPool(bwrap_backend, PoolConfig(max_size=1)) as pool:
        env = gymnasium.make("arborl/Harbor-v0", pool=pool)
        try:
            with pytest.raises(InfraError, match="needs the docker sandbox backend"):
                await areset(env, options={"task": load_task(EXAMPLES / "edit-config")})
        finally:
            env.close()


@pytest.mark.docker
async def test_an_image_whose_system_commands_others_may_write_cannot_be_graded(tmp_path, docker_backend):
    """Nothing run there as root could be trusted: the episode ends as an env error (the task's
    fault), never a tool error the agent goes on from, nor its 0."""
    folder = tmp_path / "edit-config"
    shutil.copytree(EXAMPLES / "edit-config", folder)
    dockerfile = folder / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN chmod 0777 /usr/bin\n")
    async with SandboxPool(docker_backend, PoolConfig(max_size=1)) as pool:
        env = gymnasium.make("arborl/Harbor-v0", pool=pool)
        try:
            await areset(env, options={"task": load_task(folder)})
            _, reward, _, truncated, info = await astep(env, P.format_call("submit", {}))
            assert truncated and reward == 0.0 and "verifier" not in info, info
            assert "lets others than root write /usr/bin" in info["env_error"], info
        finally:
            await arelease(env)
            env.close()
