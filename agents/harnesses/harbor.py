"""mini-swe-agent (unchanged, through the gateway) on a Harbor task folder's task.

    ep = await harbor_episode(gw, url, task, harbor_env)      # HarborEnv: its pool and images
    ep.trajectories, ep.reward, ep.verifier, ep.commands

One episode: the task's image is built if it is not yet (`HarborEnv.prepare_image`), a sandbox
of the task's `arborl/Harbor-v0` spec is leased, mini-swe-agent's own loop runs on a worker
thread with its model pointed at the gateway and every command run in the sandbox as its
unprivileged user (`SandboxEnvironment`), then the task's tests grade the sandbox exactly as
Harbor-v0 and `arborl eval` grade it (`arborl.envs.harbor.grading.run_tests`: every process
killed, tests staged by root, the reward read by the host). The sandbox is destroyed, never
reused (the tests ran as root in it). The gateway's segments come back with that reward.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from arborl.envs.harbor.env import HarborEnv
from arborl.envs.harbor.grading import TestRun, run_tests
from arborl.sandboxes import ExecResult, SandboxError
from arborl.tasks.harbor import HarborTask, HarborTaskError

from ..gateway import Gateway
from ..trajectory import Trajectory
from .mini_swe_agent import INSTANCE_TEMPLATE, SUBMIT, MiniSweAgentConfig, SandboxEnvironment, run_agent

#: mini-swe-agent's task prompt for a Harbor task (its SWE prompt speaks of an issue to fix).
HARBOR_INSTANCE_TEMPLATE = (
    "Do this task in the sandbox; you are in {{cwd}}.\n\n{{task}}\n\n"
    f"When the task is done, run `echo {SUBMIT}` alone."
)


@dataclass
class HarborHarnessEpisode:
    """One mini-swe-agent episode on a Harbor task: its gateway segments (reward = the tests'
    reward), the tests' verdict, and what the agent did."""

    trajectories: list[Trajectory]
    run: TestRun
    exit_info: dict[str, Any]
    commands: list[str]
    reward: float

    @property
    def verifier(self) -> dict[str, Any]:
        return self.run.info()


async def harbor_episode(
    gw: Gateway,
    url: str,
    task: HarborTask,
    env: HarborEnv,
    *,
    config: MiniSweAgentConfig | None = None,
    group_id: str = "",
) -> HarborHarnessEpisode:
    """Run mini-swe-agent on `task` through the gateway at `url` (see the module doc), in a
    sandbox from `env`'s pool, on `env`'s loop."""
    if task.error:
        raise HarborTaskError(task.error)
    cfg = config or MiniSweAgentConfig()
    if cfg.instance_template == INSTANCE_TEMPLATE:
        cfg = dataclasses.replace(cfg, instance_template=HARBOR_INSTANCE_TEMPLATE)
    await env.prepare_image(task)
    spec = env.sandbox_spec(task)
    image_env = env.image(task).env
    pool = env.pool
    eid = gw.open_episode(task_id=task.id, group_id=group_id)
    loop = asyncio.get_running_loop()
    commands: list[str] = []
    try:
        sb = await pool.checkout(spec)
        try:

            def run(command: str, workdir: str, timeout: float) -> ExecResult:
                coro: Coroutine[Any, Any, ExecResult] = sb.exec(command, timeout=timeout, workdir=workdir)
                return asyncio.run_coroutine_threadsafe(coro, loop).result()

            agent_env = SandboxEnvironment(run, cwd=task.workdir, timeout=cfg.command_timeout_s)
            commands = agent_env.commands
            base_url = f"{url}/e/{eid}/v1"
            try:
                exit_info = await asyncio.to_thread(
                    run_agent, base_url, gw.config.model_name, task.instruction, agent_env, cfg
                )
            except SandboxError as e:
                if e.fault != "agent":
                    raise
                # The agent's commands used up or killed its sandbox: its failure, a 0 trained on.
                exit_info = {"exit_status": "SandboxCrashed", "submission": "", "error": str(e)}
                result = TestRun(error=f"the sandbox died: {e}", error_kind="sandbox_crash")
            else:
                result = await run_tests(sb, task, image_env, sb.kill_processes)
        finally:
            pool.checkin(sb, broken=True)  # the tests ran as root in it: never reused
    except BaseException:
        gw.end_episode(eid, reward=0.0)  # closed to the harness; its segments are not trained
        raise
    trajectories = gw.end_episode(eid, reward=result.reward)
    return HarborHarnessEpisode(trajectories, result, exit_info, commands, result.reward)
