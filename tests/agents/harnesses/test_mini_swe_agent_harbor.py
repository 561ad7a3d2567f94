"""mini-swe-agent, unchanged, on Harbor task folders through the gateway: its commands run in a
sandbox of the task's image, the task's own tests grade what it left (as arborl/Harbor-v0 and
`arborl eval` grade), and its recorded tokens are the engine's. A scripted engine writes the
replies (log-probs from the real tiny model); `arborl train rollout.harness=mini_swe_agent` runs
on a Harbor folder too."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium
import pytest
from scripted_engine import Scripted
from train_cli import train_steps

import arborl.envs  # noqa: F401 - registers arborl/Harbor-v0
from arborl.agents.gateway import Gateway, GatewayConfig
from arborl.agents.gateway.serve import serving
from arborl.sandboxes import PoolConfig, SandboxPool
from arborl.tasks.harbor import load_task
from arborl.tasks.harbor.policies import solve_command

pytest.importorskip("minisweagent", reason="mini-swe-agent is not installed: run scripts/setup.sh")
from arborl.agents.harnesses.harbor import harbor_episode
from arborl.agents.harnesses.mini_swe_agent import SUBMIT, MiniSweAgentConfig

pytestmark = [pytest.mark.slow, pytest.mark.docker]
EXAMPLES = Path(__file__).parents[2] / "data" / "harbor"


def bash_call(thought: str, command: str) -> str:
    call = json.dumps({"name": "bash", "arguments": {"command": command}})
    return f"{thought}\n<tool_call>\n{call}\n</tool_call>"


@pytest.mark.parametrize(
    ("name", "solve", "reward"), [("static-site-service", True, 1.0), ("git-branch", False, 0.0)]
)
async def test_mini_swe_agent_on_a_harbor_task_is_graded_by_its_tests(
    docker_backend, hf, tok, name, solve, reward
):
    task = load_task(EXAMPLES / name)
    replies = [bash_call("Look around.", "pwd && ls -la")]
    if solve:  # the task's own solution, typed by the agent
        replies.append(bash_call("Set it up.", solve_command(task)))
    replies.append(bash_call("Done.", f"echo {SUBMIT}"))
    engine = Scripted(hf, tok, replies)
    gw = Gateway(engine, tok, GatewayConfig(admin_token="admin"))
    async with SandboxPool(docker_backend, PoolConfig(max_size=2)) as pool:
        env = gymnasium.make("arborl/Harbor-v0", pool=pool).unwrapped
        with serving(gw) as url:
            ep = await harbor_episode(gw, url, task, env, config=MiniSweAgentConfig(step_limit=5))
        env.close()
    assert ep.exit_info["exit_status"] == "Submitted" and len(ep.commands) == len(replies)
    assert ep.reward == reward and ep.verifier["graded"], ep.verifier
    (traj,) = ep.trajectories
    assert traj.outcome_reward == reward and traj.task_id == name
    last_prompt, last_completion, _ = engine.calls[-1]
    assert traj.token_ids().tolist() == last_prompt + last_completion
    assert task.workdir in tok.decode(last_prompt)  # `pwd`'s output, from the sandbox


def test_arborl_train_runs_mini_swe_agent_on_a_harbor_folder(tmp_path, docker_backend):
    rl = train_steps(
        tmp_path / "run",
        "arborl/Harbor-v0",
        "rollout.harness=mini_swe_agent",
        f"tasks.train=suite:{EXAMPLES}",
        f"tasks.eval_suite={EXAMPLES}",
        "tasks.eval_size=1",
        "async.mode=sync",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=16",
        "rollout.max_context_tokens=2048",
    )
    assert all(e["rollout/reward"] == 0.0 for e in rl), rl
