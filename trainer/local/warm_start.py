"""The warm start: supervised steps on a scripted policy's demonstrations, before RL.

The demonstrations are collected once (kept in ``<run>/sft/demos.parquet``; episodes that
failed their task are left out), then `sft.steps` steps of `sft.batch_size` of them train the
policy, evaluated on the held-out tasks before, every `sft.eval_every` steps and at the end.
The end's evaluation is also RL's step 0. Under a time budget the `Pacer` plans the phase's
length from its measured step time and plans it again as it goes (`budget.REPLAN_EVERY`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from arborl.agents import Agent, Trajectory, read_trajectories, write_trajectories
from arborl.tasks.stream import task_stream
from arborl.tasks.suites import resolve
from arborl.trainer.dataproto import trajectories_to_dataproto

from . import budget
from .budget import Pacer
from .config import TrainConfig
from .learner import Learner, LearnerConfig
from .progress import PhaseBar
from .run_context import RunContext

log = logging.getLogger(__name__)


def demo_tasks(cfg: TrainConfig, task_at: Callable[[int], Any]) -> list[Any]:
    """The tasks the gold policy demonstrates: `sft.demos` of the RL stream `task_at`, from a
    later pass over it so RL's first groups are not the demonstrated tasks; or, with
    `sft.train_options`, of the same generator under those options (another seed)."""
    if cfg.sft.train_options is None:
        return [task_at(cfg.tasks.train_size + i) for i in range(cfg.sft.demos)]
    options = {**cfg.tasks.train_options, **cfg.sft.train_options}
    demo_at = task_stream(cfg.tasks.train, cfg.sft.demos, cfg.tasks.seed + 1, options)
    return [demo_at(i) for i in range(cfg.sft.demos)]


class WarmStart:
    """The warm-start phase of a run."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.cfg = ctx.cfg.sft

    async def run(self) -> None:
        ctx, sft = self.ctx, self.cfg
        demos = await self.demonstrations()
        started = time.perf_counter()
        await ctx.evaluate("sft", 0)
        eval_s = time.perf_counter() - started
        learner = Learner(
            ctx.model,
            LearnerConfig(
                lr=sft.lr,
                warmup_steps=min(20, sft.steps // 10),
                schedule="cosine",
                total_steps=sft.steps,
                micro_batch_size=sft.micro_batch_size or sft.batch_size,
            ),
        )
        pacer = Pacer(
            ctx.budget,
            "sft",
            planned=sft.steps,
            first=0,
            eval_every=sft.eval_every,
            eval_s=eval_s,
            elapsed=ctx.elapsed,
            replan_every=budget.REPLAN_EVERY,
        )
        with ctx.progress.phase("warm start (SFT)", total=sft.steps) as bar:
            await self._steps(demos, learner, pacer, bar)
        await ctx.push_weights()
        m = await ctx.evaluate("sft", ctx.state.sft_steps)
        ctx.metrics.log("eval-rl", 0, m)
        ctx.save()

    async def demonstrations(self) -> list[Trajectory]:
        """The run's demonstrations: collected by the gold policy, or read back on a resume."""
        ctx, sft = self.ctx, self.cfg
        path = ctx.dir / "sft" / "demos.parquet"
        if path.exists():
            return read_trajectories(path)
        gold = resolve(sft.gold) if sft.gold else ctx.suite.gold_policy
        tasks = demo_tasks(ctx.cfg, ctx.task_at)
        with ctx.progress.phase("collecting demonstrations", total=None):
            agent = ctx.agent
            if sft.max_turns is not None:
                config = ctx.agent.config.model_copy(update={"max_turns": sft.max_turns})
                agent = Agent(ctx.engine, ctx.tokenizer, config)
            episodes = await agent.run_episodes(ctx.env_factory, tasks, demo=gold, concurrency=16)
        solved = [e for e in episodes if ctx.suite.success(e.trajectory.outcome_reward)]
        if len(solved) < len(episodes):
            # a demonstration cut by the context is the config's doing, not the policy's, and
            # dropping it keeps the short ones: a bias the warning must name
            cut = sum(
                e.trajectory.truncation == "context_overflow"
                for e in episodes
                if not ctx.suite.success(e.trajectory.outcome_reward)
            )
            why = (
                f" ({cut} of them cut by the context, rollout.max_context_tokens="
                f"{ctx.cfg.rollout.max_context_tokens}: the longer demonstrations are the ones "
                "lost; raise it to keep them)"
                if cut
                else ""
            )
            log.warning(
                "%d of %d demonstrations failed their task%s; left out",
                len(episodes) - len(solved),
                len(episodes),
                why,
            )
        # every segment of a long episode; a summary is the policy's text, not the gold's
        demos = [t for e in solved for t in e.segments if not t.metrics.get("summary")]
        write_trajectories(path, demos)
        return demos

    async def _steps(self, demos: list[Trajectory], learner: Learner, pacer: Pacer, bar: PhaseBar) -> None:
        """Supervised steps on shuffled passes over the demonstrations, until the pacer's
        target; evaluations every `sft.eval_every` steps, their time left out of the pace."""
        ctx, sft = self.ctx, self.cfg
        rng = random.Random(ctx.cfg.run.seed)
        order: list[int] = []
        step = 0
        while step < pacer.target:
            step += 1
            plan = pacer.before(step)
            if plan is not None:
                ctx.record_cut(plan.cut, bar, say=plan.say)
                ctx.state.sft_planned = pacer.target
                learner.config.total_steps = pacer.target  # the cosine schedule ends with the warm start
                if step > pacer.target:
                    break
            if len(order) < sft.batch_size:
                order += rng.sample(range(len(demos)), len(demos))
            batch = [demos[order.pop()] for _ in range(sft.batch_size)]
            m = await self._update(learner, batch)
            ctx.state.sft_steps = step
            bar.advance(f"nll {m['sft/nll']:.3f}")
            if step % 25 == 0 or step == pacer.target:
                ctx.metrics.log("sft", step, m)
            if sft.eval_every and step % sft.eval_every == 0 and step < pacer.target:
                started = time.perf_counter()
                await ctx.push_weights()
                await ctx.evaluate("sft", step)
                pacer.evaluated(time.perf_counter() - started)

    async def _update(self, learner: Learner, batch: list[Trajectory]) -> dict[str, float]:
        ctx = self.ctx
        data = trajectories_to_dataproto(batch, ctx.pad_token_id, rope_index=ctx.rope_index).to(ctx.device)
        return await asyncio.to_thread(ctx.in_learner_thread, learner.sft_update, data, self.cfg.env_weight)
