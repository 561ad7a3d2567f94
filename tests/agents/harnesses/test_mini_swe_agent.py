"""mini-swe-agent, unchanged, against the gateway: its commands run in a real arborl sandbox
(bubblewrap), the diff it leaves is graded by arborl's SWE grading, and its recorded tokens
are the engine's. The untrained tiny model never writes a tool call, so a scripted engine
writes the replies (log-probs from the real tiny model) and mini-swe-agent parses them."""

from __future__ import annotations

import json
import os
import uuid

import pytest
from scripted_engine import Scripted

from arborl.agents.engines import EngineError, InferenceEngine
from arborl.agents.gateway import Gateway, GatewayConfig
from arborl.agents.gateway.serve import serving
from arborl.envs.code.env import CodeEnv
from arborl.envs.code.swe_grading import grade_swe
from arborl.sandboxes import PoolConfig, SandboxPool
from arborl.tasks import get_suite
from arborl.tasks.swebench import environment_for, swe_parts, to_code_task
from arborl.tasks.swebench import real as swe_real
from arborl.tasks.swebench.repos import find_repository

pytest.importorskip("minisweagent", reason="mini-swe-agent is not installed: run scripts/setup.sh")
from arborl.agents.harnesses.mini_swe_agent import SUBMIT, HarnessInfraError, MiniSweAgentConfig, swe_episode

pytestmark = pytest.mark.slow
STRKIT = "arborl-mini__strkit-1"
# swe-real: cut from cachetools' history (a src layout; no third-party wheels to fetch)
CACHETOOLS = "tkem__cachetools-18e5930ced"


def swe_task(task_id):
    """swe-mini's task, or swe-real's in its portable form (repository files on the base image)."""
    if task_id.startswith("arborl-mini__"):
        return next(t for t in get_suite("swe-mini").tasks() if t.id == task_id)
    inst = next(i for i in swe_real.instances() if i.instance_id == task_id)
    env = environment_for(inst, swe_real.environments())
    files = find_repository(inst.repo, [swe_real.REPOS]).files_at(inst.base_commit)
    return to_code_task(inst, env, repo_files=files, metadata={"suite": "swe-real"})


def bash_call(thought: str, command: str) -> str:
    """A reply in the tiny model's native (hermes) tool-call format."""
    call = json.dumps({"name": "bash", "arguments": {"command": command}})
    return f"{thought}\n<tool_call>\n{call}\n</tool_call>"


@pytest.mark.parametrize("task_id", [STRKIT, CACHETOOLS], ids=["swe-mini", "swe-real"])
async def test_mini_swe_agent_solves_in_a_sandbox_and_is_graded_and_recorded(bwrap_backend, hf, tok, task_id):
    task = swe_task(task_id)
    inst, _ = swe_parts(task)
    marker = f"/tmp/arborl-msa-{uuid.uuid4().hex}"  # written by the agent: must stay in the sandbox
    engine = Scripted(hf, tok, [
        bash_call("Let me look.", f"touch {marker} && echo seen-$((6*7)) && git status --short"),
        bash_call("Apply the fix.", f"git apply <<'EOF'\n{inst.patch}\nEOF"),
        bash_call("A stray byte.", "echo a\x00b"),
        bash_call("Done.", f"echo {SUBMIT}"),
    ])  # fmt: skip
    gw = Gateway(engine, tok, GatewayConfig(admin_token="admin"))
    spec = CodeEnv().sandbox_spec(task)
    async with SandboxPool(bwrap_backend, PoolConfig(max_size=2)) as pool:
        with serving(gw) as url:
            ep = await swe_episode(gw, url, task, pool, config=MiniSweAgentConfig(step_limit=5), spec=spec)
        reference = await grade_swe(pool, spec, task, ep.patch)  # arborl's grading of that patch
        gold = await grade_swe(pool, spec, task, inst.patch)
    assert not os.path.exists(marker), "an agent command ran on the host"
    assert ep.exit_info["exit_status"] == "Submitted" and len(ep.commands) == 4
    # The grade is SWE grading's verdict on the diff the agent left: the gold fix, FULL.
    assert ep.grade.model_dump(exclude={"log"}) == reference.model_dump(exclude={"log"})
    assert ep.grade.status == gold.status == "FULL" and ep.reward == 1.0
    # One segment, token for token the engine's four calls, with the reward.
    (traj,) = ep.trajectories
    last_prompt, last_completion, _ = engine.calls[-1]
    assert len(engine.calls) == 4 and traj.prompt_ids == engine.calls[0][0]
    assert traj.token_ids().tolist() == last_prompt + last_completion
    for turn, (prompt, completion, lps) in zip(traj.turns, engine.calls, strict=True):
        assert turn.response_ids == completion and turn.response_logprobs == lps
        assert traj.token_ids().tolist()[: len(prompt)] == prompt
    assert sum(traj.loss_mask().tolist()) == sum(len(c) for _, c, _ in engine.calls)
    assert traj.outcome_reward == 1.0 and traj.task_id == task_id
    # What mini-swe-agent sent back as the tool results is in the last prompt: the sandbox's output.
    assert "seen-42" in tok.decode(last_prompt) and "the command contains a NUL byte" in tok.decode(
        last_prompt
    )


class Down(InferenceEngine):
    """An engine whose server is gone."""

    async def generate(self, prompts, sampling):
        raise EngineError("connection refused by the model server")

    async def update_weights(self, weights):
        raise NotImplementedError

    async def close(self):
        pass


async def test_an_engine_failure_is_an_infrastructure_error_never_a_zero(bwrap_backend, tok):
    task = swe_task(STRKIT)
    gw = Gateway(Down(), tok, GatewayConfig(admin_token="admin"))
    async with SandboxPool(bwrap_backend, PoolConfig(max_size=1)) as pool:
        with (
            serving(gw) as url,
            pytest.raises(HarnessInfraError, match="could not get a reply from the gateway"),
        ):
            await swe_episode(gw, url, task, pool, config=MiniSweAgentConfig(step_limit=2))
    assert len(gw.store) == 0  # the episode was ended: the harness can add nothing to it now
