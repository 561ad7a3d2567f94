"""The single-machine training run: a warm start, then asynchronous RL with bounded staleness.

    summary = asyncio.run(Trainer(TrainConfig.main_job()).run())   # what `arborl train` does

One process, one event loop. The run is two phases acting in turn on one `RunContext` (the
model, engine, agents, learner, tasks and run directory they share):

    RunContext.open()  ─▶  WarmStart (warm_start.py)  ─▶  Reinforce (reinforce.py)  ─▶  summary
      (resume: from the       SFT on demonstrations          rollouts + learner,
       latest checkpoint)     (when sft.steps > 0)           bounded staleness

Under `run.time_budget_min` each phase's `budget.Pacer` times its steps and plans its length.
A run directory holds everything: `metrics.jsonl`, TensorBoard logs, `trajectories/`,
`checkpoints/`, `summary.json`; `run.resume=true` continues from the latest checkpoint
without losing or repeating a trajectory group.
"""

from __future__ import annotations

import json
from typing import Any

from .config import TrainConfig
from .progress import Progress
from .reinforce import Reinforce
from .run_context import RunContext
from .warm_start import WarmStart


class Trainer:
    """Runs one training run's phases on its `RunContext` (`ctx`)."""

    def __init__(self, config: TrainConfig, progress: Progress | None = None) -> None:
        self.cfg = config
        self.ctx = RunContext(config, progress or Progress())

    async def run(self) -> dict[str, Any]:
        ctx = self.ctx
        ctx.open()
        try:
            if (ctx.state.sft_planned or self.cfg.sft.steps) > ctx.state.sft_steps:
                await self.warm_start(ctx).run()  # ends with the evaluation that is also RL's step 0
            elif ctx.state.version == 0 and not ctx.has_eval("rl", 0):
                await ctx.evaluate("rl", 0)
            ctx.anchor_reference()  # the KL's π_ref (learner.use_kl_loss): the policy as RL starts
            await self.reinforce(ctx).run()
            summary = ctx.summary()
            (ctx.dir / "summary.json").write_text(json.dumps(summary, indent=2))
            return summary
        finally:
            await ctx.close()

    def warm_start(self, ctx: RunContext) -> WarmStart:
        """The warm-start phase (a subclass may return its own)."""
        return WarmStart(ctx)

    def reinforce(self, ctx: RunContext) -> Reinforce:
        """The RL phase, made once the warm start or the step-0 evaluation is done (a subclass
        may return its own)."""
        return Reinforce(ctx)
