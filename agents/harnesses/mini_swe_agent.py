"""mini-swe-agent (the `mini-swe-agent` package, unchanged) as an arborl harness.

    trajectories, grade = await swe_episode(gw, url, task, pool)

One episode: a sandbox of the task's Code-v0 spec is leased; mini-swe-agent's own
`DefaultAgent` and `LitellmModel` run on a worker thread, the model pointed at the gateway
(`openai/<model>` with `api_base=<url>/e/<episode>/v1`), every command it issues run in the
sandbox by `SandboxEnvironment` (never on the host); the diff it leaves is captured and graded
exactly as Code-v0 and `arborl eval` grade it (`capture_patch`, then `grade_swe` in a fresh
sandbox); the gateway's segments come back with that grade as their reward. The agent never
sees the grade, the admin token, or the host.

mini-swe-agent is an optional dependency (scripts/setup.sh installs it): imported here only.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from arborl.envs.code.env import CodeEnv
from arborl.envs.code.swe_grading import grade_swe
from arborl.envs.code.verifier import GIT_ENV, capture_patch
from arborl.sandboxes import ExecResult, SandboxError, SandboxPool, SandboxSpec
from arborl.tasks import CodeTask
from arborl.tasks.swebench.grading import SWEGrade

from ..gateway import Gateway
from ..trajectory import Trajectory

#: What mini-swe-agent prints to end its episode (its LocalEnvironment's convention).
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

# Short templates: mini.yaml's ~1,500-token instructions overflow a small model's window.
SYSTEM_TEMPLATE = "You are a software engineer. Run one bash command per reply with the bash tool."
INSTANCE_TEMPLATE = (
    "Fix this issue in the repository at {{cwd}}:\n\n{{task}}\n\n"
    f"When done, run `echo {SUBMIT}` alone."
)


class MiniSweAgentMissing(ImportError):
    """mini-swe-agent (and litellm) are not installed."""


class HarnessInfraError(RuntimeError):
    """The gateway could not be reached or its engine failed: an infrastructure error (the
    episode is left out of training), never the agent's 0."""


def _import_msa() -> Any:
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # no banner on every import
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download at import
    # The gateway is local: a failed call is an infrastructure error to report, not one to wait
    # out with mini-swe-agent's default ten retries over minutes.
    os.environ.setdefault("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "2")
    try:
        import minisweagent.agents.default as agent
        import minisweagent.exceptions as exceptions
        import minisweagent.models.litellm_model as model
    except ImportError as e:
        raise MiniSweAgentMissing(
            f"mini-swe-agent is not installed ({e}): run scripts/setup.sh, which installs "
            "mini-swe-agent==2.4.6 and litellm without moving torch, numpy or transformers"
        ) from e
    return agent, model, exceptions


class SandboxEnvironment:
    """mini-swe-agent's `Environment` protocol over an arborl sandbox: `execute` runs the
    command there as the sandbox's unprivileged user (`run` carries it to the sandbox's event
    loop and blocks the agent's thread until it is done)."""

    def __init__(
        self,
        run: Callable[[str, str, float], ExecResult],
        *,
        cwd: str,
        timeout: int = 60,
        template_vars: dict[str, Any] | None = None,
    ) -> None:
        self.run = run
        self.cwd, self.timeout = cwd, timeout
        self.config: dict[str, Any] = {"cwd": cwd, "timeout": timeout}  # the protocol's `config`
        self._vars = dict(template_vars or {})
        self.commands: list[str] = []

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        command = str(action.get("command", ""))
        self.commands.append(command)
        if "\x00" in command:  # no process can take it: the agent's error, not the sandbox's
            return {"output": "", "returncode": -1, "exception_info": "the command contains a NUL byte"}
        limit = timeout or self.timeout
        r = self.run(command, cwd or self.cwd, float(limit))
        out: dict[str, Any] = {"output": r.stdout + r.stderr, "returncode": r.exit_code, "exception_info": ""}
        if r.timed_out:
            out["exception_info"] = f"the command timed out after {limit} s"
        self._check_finished(out)
        return out

    def _check_finished(self, output: dict[str, Any]) -> None:
        """mini-swe-agent's submit convention: the first line of a successful command's output."""
        lines = output["output"].lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT and output["returncode"] == 0:
            _, _, exceptions = _import_msa()
            submission = "".join(lines[1:])
            raise exceptions.Submitted(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission},
                }
            )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        # Only the sandbox's facts: the host's environment variables never reach the prompt.
        return {**self.config, **self._vars, **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"environment": self.config, "environment_type": "arborl.sandbox"}}}


@dataclass
class MiniSweAgentConfig:
    """How mini-swe-agent is run (its own `DefaultAgent` / `LitellmModel` settings)."""

    step_limit: int = 8
    max_tokens: int = 256
    command_timeout_s: int = 60
    temperature: float = 1.0
    system_template: str = SYSTEM_TEMPLATE
    instance_template: str = INSTANCE_TEMPLATE
    agent_kwargs: dict[str, Any] = field(default_factory=dict)  # more DefaultAgent settings
    model_kwargs: dict[str, Any] = field(default_factory=dict)  # more request parameters


def run_agent(
    base_url: str, model: str, task: CodeTask | str, env: SandboxEnvironment, cfg: MiniSweAgentConfig
) -> dict:
    """mini-swe-agent's own loop on `task` (its problem statement, or the task's text itself;
    blocking: call it on a worker thread); its exit info."""
    agent_mod, model_mod, _ = _import_msa()
    llm = model_mod.LitellmModel(
        model_name=f"openai/{model}",
        model_kwargs={
            "api_base": base_url,
            "api_key": "EMPTY",
            "max_tokens": cfg.max_tokens,
            "temperature": cfg.temperature,
            "max_retries": 0,  # the gateway is local: mini-swe-agent's own retry loop is enough
            **cfg.model_kwargs,
        },
        cost_tracking="ignore_errors",  # a local model has no price
    )
    agent = agent_mod.DefaultAgent(
        llm,
        env,
        system_template=cfg.system_template,
        instance_template=cfg.instance_template,
        step_limit=cfg.step_limit,
        cost_limit=0,
        **cfg.agent_kwargs,
    )
    errors = model_mod.litellm.exceptions
    try:
        return agent.run(task if isinstance(task, str) else task.problem_statement)
    except (
        errors.APIConnectionError,
        errors.InternalServerError,
        errors.BadGatewayError,
        errors.ServiceUnavailableError,
        errors.Timeout,
    ) as e:
        raise HarnessInfraError(f"mini-swe-agent could not get a reply from the gateway: {e}") from e
    except errors.ContextWindowExceededError:
        # The episode outgrew the window (the gateway's context_length_exceeded): the agent's
        # budget ran out, as Code-v0's max_turns does; its repository is graded as it is.
        return {"exit_status": "ContextWindowExceeded", "submission": ""}


@dataclass
class HarnessEpisode:
    """One mini-swe-agent episode: its gateway segments (reward = the grade), the grade, and
    what the agent did."""

    trajectories: list[Trajectory]
    grade: SWEGrade
    patch: str | None
    exit_info: dict[str, Any]
    commands: list[str]
    reward: float
    patch_error: str | None = None  # why the diff could not be read (then graded "no_patch")


async def swe_episode(
    gw: Gateway,
    url: str,
    task: CodeTask,
    pool: SandboxPool,
    *,
    config: MiniSweAgentConfig | None = None,
    group_id: str = "",
    spec: SandboxSpec | None = None,
) -> HarnessEpisode:
    """Run mini-swe-agent on `task` through the gateway at `url` (see the module doc)."""
    cfg = config or MiniSweAgentConfig()
    spec = spec or CodeEnv().sandbox_spec(task)
    eid = gw.open_episode(task_id=task.id, group_id=group_id)
    loop = asyncio.get_running_loop()
    try:
        async with pool.acquire(spec) as sb:
            head = await sb.exec(["git", "rev-parse", "HEAD"], timeout=60, env=GIT_ENV)
            # Read before the agent acts, so the agent cannot choose the base of its own diff.
            start = head.stdout.strip() if head.exit_code == 0 and head.stdout.strip() else "HEAD"

            def run(command: str, workdir: str, timeout: float) -> ExecResult:
                coro: Coroutine[Any, Any, ExecResult] = sb.exec(command, timeout=timeout, workdir=workdir)
                return asyncio.run_coroutine_threadsafe(coro, loop).result()

            env = SandboxEnvironment(run, cwd=task.workdir, timeout=cfg.command_timeout_s)
            base_url = f"{url}/e/{eid}/v1"
            try:
                exit_info = await asyncio.to_thread(run_agent, base_url, gw.config.model_name, task, env, cfg)
            except SandboxError as e:
                if e.fault != "agent":
                    raise
                # The agent's commands used up or killed its sandbox: its failure, trained on
                # with the grade of no patch (Code-v0's "sandbox_crash"), never left out.
                exit_info = {"exit_status": "SandboxCrashed", "submission": "", "error": str(e)}
                patch, patch_error = None, f"the sandbox died: {e}"
            else:
                patch, patch_error = await capture_patch(sb, start)
        # An unreadable diff (larger than the limit, ...) is the agent's doing: graded "no_patch".
        grade = await grade_swe(pool, spec, task, patch)
    except BaseException:
        gw.end_episode(eid, reward=0.0)  # closed to the harness; its segments are not trained
        raise
    reward = 1.0 if grade.resolved else 0.0
    trajectories = gw.end_episode(eid, reward=reward)
    return HarnessEpisode(trajectories, grade, patch, exit_info, env.commands, reward, patch_error)
