"""mini-swe-agent episodes as a rollout source for `arborl train` (`rollout.harness=mini_swe_agent`).

    runner = MiniSweAgentRunner(engine, tokenizer, GatewayConfig(...), MiniSweAgentConfig(...))
    ep = await runner.run_episode(env, task, group_id="group-0")   # what RolloutManager calls
    ep.trajectories   # the gateway's segments, each with the episode's SWE grade as reward
    await runner.aclose()

It stands where arborl's `Agent` stands in the rollout loop: the gateway (started on first use,
on its own thread) serves the trainer's engine, whose calls are carried back to the trainer's
event loop, so the engine is only ever used from the loop it runs on; each episode leases a
sandbox from the env's pool (on the env event loop) and runs `swe_episode` there (Code-v0), or
`harbor_episode` (Harbor-v0: a Harbor task folder's task, graded by its tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium

from arborl.envs.benchmarks import InfraError
from arborl.envs.code.env import CodeEnv
from arborl.envs.event_loop import get_env_loop
from arborl.envs.harbor.env import HarborEnv
from arborl.sandboxes import SandboxError

from ..engines import EngineError, Generation, InferenceEngine, SamplingParams
from ..engines.base import WeightsSource
from ..gateway import Gateway, GatewayConfig
from ..gateway.serve import serving
from ..trajectory import Trajectory
from .harbor import HarborHarnessEpisode, harbor_episode
from .mini_swe_agent import HarnessEpisode, HarnessInfraError, MiniSweAgentConfig, swe_episode

log = logging.getLogger(__name__)


class _OnLoop(InferenceEngine):
    """`engine`, called from any loop, run on the loop `engine` belongs to."""

    def __init__(self, engine: InferenceEngine, loop: asyncio.AbstractEventLoop) -> None:
        self.engine, self.loop = engine, loop

    async def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        future = asyncio.run_coroutine_threadsafe(self.engine.generate(prompts, sampling), self.loop)
        return await asyncio.wrap_future(future)

    async def update_weights(self, weights: WeightsSource) -> None:
        raise NotImplementedError("the trainer updates the engine itself")

    async def close(self) -> None:
        pass


@dataclass
class HarnessResult:
    """What `RolloutManager` reads of an episode (as of `AgentEpisode`), with every segment."""

    trajectories: list[Trajectory]
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def trajectory(self) -> Trajectory:
        return self.trajectories[0]

    @property
    def segments(self) -> list[Trajectory]:
        """As `AgentEpisode.segments`: every segment, in order."""
        return self.trajectories


class MiniSweAgentRunner:
    """Runs mini-swe-agent episodes for the trainer (see the module doc)."""

    def __init__(
        self,
        engine: InferenceEngine,
        tokenizer: Any,
        gateway: GatewayConfig | None = None,
        config: MiniSweAgentConfig | None = None,
    ) -> None:
        self.engine, self.tokenizer = engine, tokenizer
        self.gateway_config = gateway or GatewayConfig()
        self.config = config or MiniSweAgentConfig()
        self.version_offset = 0  # as `Agent`'s: added to the engine's weight-update count
        self._stack = contextlib.ExitStack()
        self._served: tuple[Gateway, str] | None = None

    def _gateway(self) -> tuple[Gateway, str]:
        if self._served is None:
            engine = _OnLoop(self.engine, asyncio.get_running_loop())
            gw = Gateway(engine, self.tokenizer, self.gateway_config)
            self._served = (gw, self._stack.enter_context(serving(gw)))
        return self._served

    async def run_episode(
        self, env: gymnasium.Env, task: Any, *, group_id: str = "", **_: Any
    ) -> HarnessResult:
        """One graded episode of `task` in a sandbox of `env`'s pool (the env itself is not
        stepped: the harness drives the sandbox). The pool is the shared one on the env event
        loop, as `arborl train` makes its envs (a `pool=` of another loop is not supported). Between-turn gates do not apply: the harness
        owns its loop, so partial rollouts are refused by the config."""
        code_env = env.unwrapped
        if not isinstance(code_env, CodeEnv | HarborEnv):
            raise TypeError(
                f"mini-swe-agent runs on arborl/Code-v0 and arborl/Harbor-v0 tasks, not on {type(code_env).__name__}"
            )
        gw, url = self._gateway()
        try:
            if isinstance(code_env, HarborEnv):
                ep: HarnessEpisode | HarborHarnessEpisode = await get_env_loop().hop(
                    harbor_episode(gw, url, task, code_env, config=self.config, group_id=group_id)
                )
            else:
                spec = code_env.sandbox_spec(task)
                ep = await get_env_loop().hop(
                    swe_episode(
                        gw, url, task, code_env.pool, config=self.config, group_id=group_id, spec=spec
                    )
                )
        except (SandboxError, EngineError, HarnessInfraError, InfraError, OSError) as e:
            log.warning("a mini-swe-agent episode failed for infrastructure reasons: %s", e)
            failed = Trajectory(prompt_ids=[0], task_id=str(getattr(task, "id", "")), group_id=group_id)
            failed.truncation = "env_error"
            return HarnessResult([failed], error=f"{type(e).__name__}: {e}")
        for traj in ep.trajectories:
            for turn in traj.turns:
                turn.policy_versions = [
                    v + self.version_offset if v >= 0 else v for v in turn.policy_versions
                ]
            traj.metrics["harness/steps"] = float(len(ep.commands))
        grade = ep.grade.status if isinstance(ep, HarnessEpisode) else ep.run.error_kind or "graded"
        info = {"grade": grade, "exit_status": ep.exit_info.get("exit_status")}
        return HarnessResult(ep.trajectories, info=info)

    async def aclose(self) -> None:
        self._stack.close()
        self._served = None
