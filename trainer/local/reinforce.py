"""Reinforcement learning: rollout groups in flight while the learner trains on finished ones.

    task stream ─▶ RolloutManager ──groups──▶ store (Parquet) ─▶ GroupBuffer ─▶ learner
         ▲            (agent + envs)                                             │
         └──────────────── engine.update_weights (policy version + 1) ◀──────────┘

Rollout groups (`rollout.RolloutManager`) run on the event loop while the learner's update
runs in a worker thread. Synchronous training is the same code with staleness 0 (see
`RolloutManager` for how the mode sets the dispatch limit). Each step takes
`rollout.groups_per_step` groups from the buffer, computes their advantages
(`algorithm.estimator`), updates the policy and pushes the weights to the engine; held-out
evaluations every `run.eval_every` steps and at the last, checkpoints every
`run.checkpoint_every`. Under a time budget the `Pacer` plans RL's length once, from its
first steps. The entropy guard (`run.entropy_guard`, guards.py) ends RL early when the policy's
entropy explodes: that step is evaluated and checkpointed as a last step is, and the reason is
logged (a `stopped` event) and put in the summary.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import torch

from arborl.agents import Trajectory
from arborl.agents.credit.anchors import batch_anchor_stats, similarity_thresh_of
from arborl.agents.credit.gigpo import GIGPO_GAMMA
from arborl.agents.credit.registry import uniform_groups_carry_signal
from arborl.agents.trajectory import episodes_of
from arborl.envs.state_hash import state_hash_failures

from .budget import Pacer
from .buffer import Group, TakeStats
from .guards import EntropyGuard
from .metrics_log import read_metrics
from .progress import PhaseBar
from .rollout import RolloutManager, dispatch_limit, max_in_flight
from .run_context import RunContext
from .segments import credited_batch
from .staleness import StalenessBound


def turn_rewards_of(t: Trajectory) -> list[float]:
    """Each turn's reward, the episode's outcome beyond them on its last turn (as the batch
    places them: `arborl.trainer.dataproto`)."""
    rewards = [turn.reward for turn in t.turns]
    if rewards:
        rewards[-1] += t.outcome_reward - sum(rewards)
    return rewards


def groups_with_signal(groups: list[Group], drop_uniform: bool) -> tuple[list[Group], int]:
    """The groups to train on, and how many of ``groups`` are uniform (every episode scored the
    same); with ``drop_uniform`` those are left out (the estimator gives them no signal)."""
    kept, uniform = [], 0
    for g in groups:
        same = len({round(t.outcome_reward, 9) for t in g.trajectories}) == 1
        uniform += same
        if not (same and drop_uniform):
            kept.append(g)
    return kept, uniform


class Reinforce:
    """The RL phase of a run; `pacer.target` is its last step (the config's, unless the
    budget cuts it)."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        cfg = ctx.cfg
        # the process's count (envs/state_hash.py) includes whatever ran before this phase
        self.hash_failures_before = sum(state_hash_failures().values())
        self.pacer = Pacer(
            ctx.budget,
            "rl",
            planned=cfg.run.steps,
            first=ctx.state.version,
            eval_every=cfg.run.eval_every,
            eval_s=ctx.last_eval_s,
            elapsed=ctx.elapsed,
        )
        # a resumed run's guard starts from the steps it logged (and stops again at once if
        # they ended in an explosion and its options were not changed)
        self.guard = EntropyGuard(cfg.run.entropy_guard)
        self.stop_reason = self.guard.replay(e for e in read_metrics(ctx.dir) if e["phase"] == "rl")
        # the async staleness bound, lowered while the batches' ESS is low (async.ess_throttle);
        # a resumed run replays its logged ESS to start where it stopped
        self.bound = StalenessBound(cfg.async_)
        self.bound.replay(e for e in read_metrics(ctx.dir) if e["phase"] == "rl")

    async def run(self) -> None:
        ctx = self.ctx
        self._split_threads()
        manager = self._rollouts()
        runner = asyncio.create_task(manager.run(), name="rollouts")
        try:
            with ctx.progress.phase(
                "reinforcement learning", total=self.pacer.target, done=ctx.state.version
            ) as bar:
                while (
                    ctx.state.version < self.pacer.target
                    and not self.pacer.out_of_time()
                    and self.stop_reason is None
                ):
                    plan = self.pacer.before(ctx.state.version + 1)
                    if plan is not None:
                        ctx.record_cut(plan.cut, bar, say=plan.say)
                        if ctx.state.version >= self.pacer.target:
                            break
                    await self._step(manager, runner, bar)
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
            await manager.close()
        if self.stop_reason is not None:
            ctx.stop(self.stop_reason)
        ctx.save()  # after the rollouts stopped, so it accounts for every stored group

    def _split_threads(self) -> None:
        """Async RL runs the engine's decode thread and the learner at the same time: each gets
        half of the torch threads instead of both taking all of them (oversubscribed cores,
        slower for both). Sync RL and the warm start run one at a time, with all of them."""
        ctx = self.ctx
        threads = ctx.threads  # the run's (model.torch_threads, when set)
        split = ctx.cfg.async_.mode == "async" and ctx.cfg.async_.split_threads and threads > 1
        ctx.engine.threads = threads // 2 if split else threads
        ctx.learner_threads = threads - threads // 2 if split else threads

    def _rollouts(self) -> RolloutManager:
        ctx, cfg = self.ctx, self.ctx.cfg
        groups_per_step = cfg.rollout.groups_per_step
        return RolloutManager(
            ctx.rollouts,
            ctx.env_factory,
            ctx.task_at,
            ctx.buffer,
            ctx.store,
            group_size=cfg.rollout.group_size,
            limit=lambda: dispatch_limit(cfg.async_, groups_per_step, ctx.state.version, self.bound.current),
            max_in_flight=max_in_flight(cfg.async_, groups_per_step),
            cursor=ctx.state.cursor,
            redo=ctx.redo,
            tree=cfg.rollout.tree,
        )

    async def _take(self, runner: asyncio.Task[None]) -> tuple[list[Group], TakeStats]:
        """The next batch of groups from the buffer; the rollouts' error if they died."""
        ctx = self.ctx
        take = asyncio.create_task(ctx.buffer.take(ctx.cfg.rollout.groups_per_step, ctx.state.version))
        await asyncio.wait({take, runner}, return_when=asyncio.FIRST_COMPLETED)
        if not take.done():  # the rollouts died: surface their error
            take.cancel()
            await runner
        return take.result()

    async def _step(self, manager: RolloutManager, runner: asyncio.Task[None], bar: PhaseBar) -> None:
        """One policy update: take a batch, train on it, push the weights, log, evaluate and
        checkpoint when due."""
        ctx, cfg = self.ctx, self.ctx.cfg
        t0 = time.perf_counter()
        groups, stats = await self._take(runner)
        wait_s = time.perf_counter() - t0
        if cfg.async_.mode == "sync" and cfg.async_.partial_rollouts:
            manager.pause()
        t1 = time.perf_counter()
        m = await asyncio.to_thread(ctx.in_learner_thread, self._update, groups)
        train_s = time.perf_counter() - t1
        ctx.state.version += 1
        ctx.state.trained += [g.index for g in groups]
        ctx.state.dropped += stats.dropped
        ctx.state.cursor = manager.dispatched
        t2 = time.perf_counter()
        await ctx.push_weights()  # lands between two of the engine's decode steps
        push_s = time.perf_counter() - t2
        self.bound.observe(m.get("offpolicy/ess"))  # before notify: the limit reads it
        manager.resume()
        await manager.notify()
        m.update(self.rollout_metrics(groups, stats, wait_s, train_s, manager))
        m["time/push_s"] = push_s
        m["sync/bytes"] = float(ctx.last_push_bytes)  # the adapter's alone with model.lora
        ctx.metrics.log("rl", ctx.state.version, m)
        bar.advance(f"reward {m['rollout/reward']:.2f} · success {m['rollout/success']:.2f}")
        v = ctx.state.version
        self.stop_reason = self.guard.observe(v, m.get("actor/entropy"))
        last = v == self.pacer.target or self.pacer.out_of_time() or self.stop_reason is not None
        if v % cfg.run.eval_every == 0 or last:
            await ctx.evaluate("rl", v)
        if v % cfg.run.checkpoint_every == 0 and not last:
            ctx.save()

    def _update(self, groups: list[Group]) -> dict[str, float]:
        """Advantages of the groups that carry a learning signal, then the PPO update."""
        ctx, algorithm = self.ctx, self.ctx.cfg.algorithm
        drop = algorithm.drop_uniform_groups and not uniform_groups_carry_signal(algorithm.estimator)
        kept, uniform = groups_with_signal(groups, drop)
        trajs = [t for g in kept for t in g.trajectories]
        weights = [g.weight for g in kept for _ in g.trajectories]
        metrics: dict[str, float] = {
            "batch/uniform_groups": float(len(groups) - len(kept)),
            "batch/uniform_group_fraction": uniform / max(1, len(groups)),
            "batch/trajectories": float(len(trajs)),
            "batch/episodes": float(len(episodes_of(trajs))),
            **self.anchor_metrics([t for g in groups for t in g.trajectories]),
        }
        if not trajs:
            return metrics  # no learning signal in this batch: the weights stay as they are
        # an episode of several segments is credited once, each segment trained with it
        data = credited_batch(
            trajs,
            ctx.pad_token_id,
            algorithm.estimator,
            rope_index=ctx.rope_index,  # a VLM's batches carry the turns' pixels and positions
            **algorithm.estimator_options,
        )
        data.batch["advantages"] = data.batch["advantages"] * torch.tensor(weights).unsqueeze(1)
        mask = data.batch["response_mask"].bool()
        metrics["batch/advantage_abs_mean"] = (
            float(data.batch["advantages"][mask].abs().mean()) if mask.any() else 0.0
        )
        # credit on the CPU (numba), the update on the model's device
        metrics.update(ctx.learner.ppo_update(data.to(ctx.device)))
        return metrics

    def anchor_metrics(self, trajs: list[Trajectory]) -> dict[str, float]:
        """GiGPO's anchor groups in this batch (whatever the estimator: it tells whether GiGPO
        could differ from GRPO here), grouped as the configured gigpo options group them."""
        options = self.ctx.cfg.algorithm.estimator_options
        gigpo = self.ctx.cfg.algorithm.estimator == "gigpo"
        stats = batch_anchor_stats(
            [t.group_id or t.traj_id for t in trajs],
            [[turn.anchor_state_hash for turn in t.turns] for t in trajs],
            [[turn.anchor_observation for turn in t.turns] for t in trajs],
            similarity_thresh_of(options) if gigpo else None,
            rewards=[turn_rewards_of(t) for t in trajs],
            gamma=float(options.get("gamma", GIGPO_GAMMA)) if gigpo else GIGPO_GAMMA,
        )
        return {f"anchors/{k}": v for k, v in stats.items()}

    def rollout_metrics(
        self, groups: list[Group], stats: TakeStats, wait_s: float, train_s: float, manager: RolloutManager
    ) -> dict[str, float]:
        """What a step logs of its batch: rewards, turns, tokens, staleness, timings."""
        rows = [t for g in groups for t in g.trajectories]
        # per episode: its last segment carries the episode's metrics (segments add up)
        trajs = [rows[e[-1]] for e in episodes_of(rows)]
        n = max(1, len(trajs))
        tokens = sum(t.num_response_tokens for t in rows)
        truncations = Counter(t.truncation for t in trajs if t.truncation)
        out = {
            "rollout/reward": sum(t.outcome_reward for t in trajs) / n,
            "rollout/success": sum(self.ctx.suite.success(t.outcome_reward) for t in trajs) / n,
            "rollout/turns": sum(t.metrics.get("turns", len(t.turns)) for t in trajs) / n,
            "rollout/response_tokens": tokens / n,
            "rollout/segments": len(rows) / n,
            "rollout/gen_s": sum(t.metrics.get("gen_s", 0.0) for t in trajs) / n,
            "rollout/env_s": sum(t.metrics.get("env_s", 0.0) for t in trajs) / n,
            "rollout/tool_errors": sum(t.metrics.get("tool_errors", 0.0) for t in trajs) / n,
            "rollout/infra_failures": float(manager.stats.infra_failures),
            # states the env could not hash this phase are unknown to GiGPO (no anchor): counted,
            # not hidden
            "rollout/state_hash_failures": float(
                sum(state_hash_failures().values()) - self.hash_failures_before
            ),
            "staleness/mean": sum(k * c for k, c in stats.staleness.items())
            / max(1, sum(stats.staleness.values())),
            "staleness/max": float(max(stats.staleness, default=0)),
            "staleness/dropped_groups": float(len(stats.dropped)),
            "staleness/dropped_tokens": float(stats.dropped_tokens),
            "staleness/downweighted_groups": float(len(stats.downweighted)),
            "staleness/downweighted_tokens": float(stats.downweighted_tokens),
            "staleness/kept_tokens": float(stats.tokens),
            **({"staleness/bound": float(self.bound.current)} if self.ctx.cfg.async_.mode == "async" else {}),
            "time/wait_s": wait_s,
            "time/train_s": train_s,
            "time/elapsed_s": self.ctx.elapsed(),
            "throughput/tokens_per_s": tokens / max(1e-9, wait_s + train_s),
        }
        out.update({f"staleness/hist_{k}": float(c) for k, c in stats.staleness.items()})
        out.update({f"truncated/{k}": c / n for k, c in truncations.items()})
        return out
