"""What plays an episode during evaluation: a scripted policy of the suite, or a model agent.

Both return an `EpisodeRecord`, or raise `InfraError` when the sandbox layer failed (the
runner retries those); anything the policy or model does wrong is recorded in the episode
(`error`), never retried. A sandbox that dies mid-episode is told apart by the env's step
info: `sandbox_error` (why) and `sandbox_fault`: `"agent"` when the agent's own actions
killed it (memory, disk, processes, its server: a result, `agent_crash`), `"infra"` or
absent when the agent could not have caused it (an infrastructure error, retried).

- `PolicyDriver` ("gold" / "empty"): `(messages, info) -> reply` from the suite's factory.
- `ModelDriver` ("model"): `arborl.agents.Agent` over an inference engine and its tokenizer,
  token-exact; the trajectory is kept for the run directory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import gymnasium

from arborl.envs import afinish
from arborl.envs.benchmarks import EpisodeRecord, InfraError
from arborl.envs.episodes import Episode, PolicyError, play_episode
from arborl.envs.wrappers import approx_tokens
from arborl.sandboxes import ImageBuildError, SandboxError, SandboxUnavailable
from arborl.tasks import Suite, Task

from .config import ModelSection

#: Sandbox errors that another attempt cannot fix (a missing image, a failed image build).
PERMANENT = (SandboxUnavailable, ImageBuildError)


def check_infra(record: EpisodeRecord) -> EpisodeRecord:
    """Raise InfraError if the episode ended because its sandbox failed, unless the agent made
    it fail: that episode is returned, to be counted as the agent's failure (`agent_crash`)."""
    failure = record.sandbox_failure()
    if failure is not None and not failure.by_agent:
        raise InfraError(f"the sandbox failed mid-episode: {failure.why}")
    return record


class Driver(Protocol):
    async def run(self, env: gymnasium.Env, task: Task, sample: int, max_turns: int) -> EpisodeRecord: ...

    async def close(self) -> None: ...


def _approx_tokens(messages: list[dict[str, Any]]) -> tuple[int, int]:
    response = sum(approx_tokens(str(m.get("content", ""))) for m in messages if m.get("role") == "assistant")
    total = sum(approx_tokens(str(m.get("content", ""))) for m in messages)
    return total - response, response


class PolicyDriver:
    """The suite's gold or empty policy.

    These are the harness's own scripted policies, not an agent under test: when one raises
    (the gold policy's simulator died, its solver failed), the harness failed, so the attempt
    is an infrastructure error, retried, and never a score of 0 that a headline would read as
    a miss."""

    def __init__(self, suite: Suite, kind: str) -> None:
        self.kind = kind
        self.factory: Callable[[Task], Any] = suite.gold_policy if kind == "gold" else suite.empty_policy

    async def run(self, env: gymnasium.Env, task: Task, sample: int, max_turns: int) -> EpisodeRecord:
        policy, ep = self.factory(task), Episode(task_id=task.id)
        try:
            await play_episode(env, policy, task, ep, max_turns=max_turns)
        except PolicyError as e:
            raise InfraError(f"the suite's scripted {self.kind} policy failed: {e}") from e
        except SandboxError as e:
            if ep.infos:  # mid-episode: the runner sees the env fail
                raise
            raise InfraError(f"{type(e).__name__}: {e}", permanent=isinstance(e, PERMANENT)) from e
        rec = EpisodeRecord(ep.messages, ep.infos, ep.rewards, ep.terminated, ep.truncated)
        if not (rec.terminated or rec.truncated):  # out of turns: score it now
            bonus, extra = await afinish(env)
            if rec.rewards:
                rec.rewards[-1] += bonus
            rec.infos.append({**extra, "truncated_by": "max_turns"})
            rec.truncated = True
        rec.prompt_tokens, rec.response_tokens = _approx_tokens(rec.messages)
        return check_infra(rec)

    async def close(self) -> None:
        pass


class ModelDriver:
    """An LLM agent (`arborl.agents.Agent`); the model is loaded once and shared by all episodes."""

    def __init__(self, cfg: ModelSection, max_turns: int) -> None:
        from arborl.agents import Agent, AgentConfig
        from arborl.agents.engines import SamplingParams, make_engine
        from arborl.agents.vision import load_policy_tokenizer

        if cfg.path is None:
            from arborl.agents.tiny import ensure_tiny_model

            path = str(ensure_tiny_model())
        else:
            from arborl.agents.engines.weights import resolve_model_dir

            path = resolve_model_dir(cfg.path)  # a model, a checkpoint or a training run
        self.path = path
        self.engine = make_engine({"model": path, **cfg.engine})
        self.tokenizer = load_policy_tokenizer(path)  # a VLM's processor: its images go through it
        self.cfg = cfg
        self._make_agent = lambda seed: Agent(
            self.engine,
            self.tokenizer,
            AgentConfig(
                max_turns=max_turns,
                max_new_tokens=cfg.max_new_tokens,
                max_context_tokens=cfg.max_context_tokens,
                context=cfg.context,
                sampling=SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, seed=seed),
            ),
        )
        self._agents: dict[int, Any] = {}

    async def run(self, env: gymnasium.Env, task: Task, sample: int, max_turns: int) -> EpisodeRecord:
        if sample not in self._agents:  # one seed per sample index: pass@k samples differ
            self._agents[sample] = self._make_agent(None if self.cfg.seed is None else self.cfg.seed + sample)
        try:
            ep = await self._agents[sample].run_episode(env, task, group_id=f"{task.id}#{sample}")
        except SandboxError as e:
            raise InfraError(f"{type(e).__name__}: {e}", permanent=isinstance(e, PERMANENT)) from e
        traj = ep.trajectory
        rec = EpisodeRecord(
            messages=list(ep.messages),
            infos=list(ep.infos),
            rewards=[t.reward for t in traj.turns],
            terminated=traj.terminated,
            truncated=traj.truncation is not None,
            error=ep.error,
            prompt_tokens=len(traj.prompt_ids),
            response_tokens=traj.num_response_tokens,
            tokens_exact=True,
            trajectory=traj,
            extra={"truncation": traj.truncation, "total_tokens": len(traj)},
        )
        return check_infra(rec)

    async def close(self) -> None:
        await self.engine.close()


def make_driver(kind: str, suite: Suite, model: ModelSection, max_turns: int) -> Driver:
    if kind in ("gold", "empty"):
        return PolicyDriver(suite, kind)
    if kind == "model":
        return ModelDriver(model, max_turns)
    raise ValueError(f"unknown agent {kind!r}: gold, empty or model")
