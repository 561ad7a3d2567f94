"""The single-machine training run: warm start, then asynchronous RL with bounded staleness.

    summary = asyncio.run(Trainer(TrainConfig.main_job()).run())   # what `arborl train` does

One process, one event loop: rollout groups (`rollout.RolloutManager`) run on the loop
while the learner's update runs in a worker thread, joined by a bounded `GroupBuffer`::

    task stream ─▶ RolloutManager ──groups──▶ store (Parquet) ─▶ GroupBuffer ─▶ learner
         ▲            (agent + envs)                                             │
         └──────────────── engine.update_weights (policy version + 1) ◀──────────┘

Synchronous training is the same code with staleness 0 (see `RolloutManager` for how the
mode sets the dispatch limit). A run directory holds everything: `metrics.jsonl`,
TensorBoard logs, `trajectories/`, `checkpoints/`, `summary.json`; `run.resume=true`
continues from the latest checkpoint without losing or repeating a trajectory group.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import logging
import math
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch

from arborl.agents import Agent, AgentConfig, read_trajectories, write_trajectories
from arborl.agents.credit import compute_advantages
from arborl.agents.engines import HFEngineConfig, InferenceEngine, SamplingParams
from arborl.agents.engines.hf import HFEngine
from arborl.agents.engines.weights import resolve_model_dir
from arborl.agents.tiny import ensure_tiny_model
from arborl.kernels.attention import register_sdpa_gqa
from arborl.tasks import get_suite
from arborl.tasks.stream import task_stream
from arborl.tasks.suites import resolve
from arborl.trainer.batch import trajectories_to_dataproto

from .budget import Cut, PhaseBudget
from .buffer import Group, GroupBuffer
from .checkpoint import Checkpointer, RunState
from .config import TrainConfig
from .learner import Learner, LearnerConfig
from .metrics_log import MetricsLogger, success_metrics
from .progress import Progress
from .rollout import RolloutManager, dispatch_limit, max_in_flight, max_staleness
from .store import TrajectoryStore

log = logging.getLogger(__name__)
REPLAN_EVERY = 50  # warm-start steps between two plans of its length


def resolve_device(device: str) -> torch.device:
    """``auto``: the CUDA device when there is one, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class RunDirError(RuntimeError):
    """The run directory holds another run (resume it, or pick another directory)."""


class Trainer:
    """Owns the model, engine, agent and run directory of one training run."""

    def __init__(self, config: TrainConfig, progress: Progress | None = None) -> None:
        self.cfg = config
        self.dir = Path(config.run.dir)
        self.progress = progress or Progress()
        self.state = RunState()
        self._pushes = 0  # engine weight updates so far (the engine counts them too)
        self.cuts: dict[str, Cut] = {}  # what the time budget planned for each phase
        self.rl_steps = config.run.steps  # RL's last step: the config's, unless the budget cuts it
        self._last_eval_s = 0.0  # how long the latest held-out evaluation took

    # ---- public --------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        self._t0 = time.time()
        self._setup()
        try:
            if (self.state.sft_planned or self.cfg.sft.steps) > self.state.sft_steps:
                await self._warm_start()  # ends with the evaluation that is also RL's step 0
            elif self.state.version == 0 and not self._has_eval("rl", 0):
                await self._evaluate("rl", 0)
            await self._reinforce()
            summary = self._summary()
            (self.dir / "summary.json").write_text(json.dumps(summary, indent=2))
            return summary
        finally:
            await self.engine.close()
            self.metrics.close()

    # ---- setup -----------------------------------------------------------------------------
    def _setup(self) -> None:
        self._seed()
        resume, latest = self._open_run_dir()
        base = (
            resolve_model_dir(self.cfg.model.path)
            if self.cfg.model.path
            else str(ensure_tiny_model(config=self.cfg.model.tiny))
        )
        weights = str(latest / "model") if resume and latest else base
        self._load_model(base, weights)
        self.metrics = MetricsLogger(
            self.dir, wandb=self.cfg.run.wandb, config=self.cfg.model_dump(by_alias=True)
        )
        self.store = TrajectoryStore(self.dir / "trajectories")
        self._load_tasks()
        self.engine = self._make_engine(base, weights)
        self._make_agents()
        self._make_learner(weights)
        if resume:
            self._restore(latest)

    def _seed(self) -> None:
        """Torch threads and the Python, NumPy and torch seeds."""
        cfg = self.cfg
        if cfg.model.torch_threads:
            torch.set_num_threads(cfg.model.torch_threads)
        self._threads = self._learner_threads = torch.get_num_threads()
        random.seed(cfg.run.seed)
        np.random.seed(cfg.run.seed)
        torch.manual_seed(cfg.run.seed)

    def _open_run_dir(self) -> tuple[bool, Path | None]:
        """(whether this continues a run, its latest checkpoint); refuses a run directory that
        holds another run unless resuming, and a resume with nothing to resume."""
        cfg = self.cfg
        self.ckpt = Checkpointer(self.dir, keep=cfg.run.keep_checkpoints)
        latest = self.ckpt.latest()
        started = (self.dir / "metrics.jsonl").exists()
        if started and cfg.run.resume is False:
            raise RunDirError(
                f"{self.dir} already holds a run: continue it (run.resume=true) or set another run.dir"
            )
        if cfg.run.resume is True and latest is None:
            raise RunDirError(f"nothing to resume in {self.dir}: it has no checkpoint")
        # A run killed before its first checkpoint resumes from scratch, keeping what it stored.
        return started and cfg.run.resume is not False, latest

    def _load_model(self, base: str, weights: str) -> None:
        """The tokenizer (from `base`) and the policy (from `weights`) on the run's device."""
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(base)
        self.device = resolve_device(self.cfg.model.device)
        self.model = self._from_pretrained(weights)

    def _from_pretrained(self, weights: str) -> Any:
        from transformers import AutoModelForCausalLM

        # Grouped-query attention without repeating the key/value heads on CPU (the engine's
        # default too; same logits and gradients as transformers' sdpa, kernels/attention.py).
        attn = register_sdpa_gqa()
        dtype = getattr(torch, self.cfg.model.dtype)
        model = AutoModelForCausalLM.from_pretrained(weights, dtype=dtype, attn_implementation=attn)
        return model.to(self.device)

    def _load_tasks(self) -> None:
        """The training task stream, the evaluation suite's held-out tasks and the env factory."""
        cfg = self.cfg
        # The task stream first: importing its module may register the suites used below.
        self.task_at = task_stream(
            cfg.tasks.train, cfg.tasks.train_size, cfg.tasks.seed, cfg.tasks.train_options
        )
        suite = get_suite(cfg.tasks.eval_suite)
        self.suite = suite
        env_id = cfg.rollout.env_id or suite.env_id
        env_kwargs = {**suite.env_kwargs, **cfg.rollout.env_kwargs}
        self.env_factory = lambda: gymnasium.make(env_id, **env_kwargs)
        self.eval_tasks = suite.tasks()[: cfg.tasks.eval_size]

    def _make_agents(self) -> None:
        """The sampling agent (rollouts) and the greedy one (evaluations) over the engine."""
        ro = self.cfg.rollout
        sampling = SamplingParams(temperature=ro.temperature, top_p=ro.top_p)
        budgets = {"max_turns": ro.max_turns, "max_new_tokens": ro.max_new_tokens}
        budgets["max_context_tokens"] = ro.max_context_tokens
        self.agent = Agent(self.engine, self.tokenizer, AgentConfig(sampling=sampling, **budgets))
        self.greedy = Agent(
            self.engine, self.tokenizer, AgentConfig(sampling=SamplingParams(temperature=0), **budgets)
        )

    def _make_learner(self, weights: str) -> None:
        """The learner (with a frozen reference model when KL is on) and the group buffer."""
        cfg, ro = self.cfg, self.cfg.rollout
        learner_cfg = cfg.learner.model_copy(update={"temperature": ro.temperature})
        ref = None
        if learner_cfg.kl_coef > 0:  # the KL anchor: the policy as the run starts (after any warm start)
            ref = self._from_pretrained(weights).eval().requires_grad_(False)
        self.learner = Learner(self.model, learner_cfg, ref_model=ref)
        self.buffer = GroupBuffer(
            capacity=max(2 * ro.groups_per_step, cfg.async_.max_groups_in_flight),
            max_staleness=max_staleness(cfg.async_),
            stale=cfg.async_.stale,
        )

    def _restore(self, path: Path | None) -> None:
        """Continue from checkpoint `path` (None: from the start): stored groups that were not
        trained go back into the buffer, groups that were in flight are run again."""
        if path is not None:
            learner_state, self.state = self.ckpt.load(path)
            self.learner.load_state_dict(learner_state)
        v, s = self.state.version, self.state.sft_steps
        self.metrics.mark_rolled_back({"rl": v, "eval-rl": v, "sft": s, "eval-sft": s})
        done = set(self.state.trained) | set(self.state.dropped)
        stored = set(self.store.indices())
        for index in sorted(stored - done):
            self.buffer.put_nowait(Group(index, self.store.get(index)))
        cursor = max([self.state.cursor, *(i + 1 for i in stored)])
        self._redo = [i for i in range(cursor) if i not in stored and i not in done]
        self.state.cursor = cursor
        self.agent.version_offset = self.greedy.version_offset = self.state.version
        log.info(
            "resumed %s at version %d: %d groups back in the buffer, %d to run again",
            path.name if path else "a run without checkpoints",
            self.state.version,
            len(stored - done),
            len(self._redo),
        )

    def _has_eval(self, phase: str, step: int) -> bool:
        from .metrics_log import read_metrics

        return any(
            e.get("phase") == f"eval-{phase}" and e.get("step") == step for e in read_metrics(self.dir)
        )

    # ---- warm start ------------------------------------------------------------------------
    def _demo_tasks(self) -> list[Any]:
        """The tasks the gold policy demonstrates: `sft.demos` of the RL stream, from a later
        pass over it so RL's first groups are not the demonstrated tasks; or, with
        `sft.train_options`, of the same generator under those options (another seed)."""
        cfg = self.cfg
        if cfg.sft.train_options is None:
            return [self.task_at(cfg.tasks.train_size + i) for i in range(cfg.sft.demos)]
        options = {**cfg.tasks.train_options, **cfg.sft.train_options}
        demo_at = task_stream(cfg.tasks.train, cfg.sft.demos, cfg.tasks.seed + 1, options)
        return [demo_at(i) for i in range(cfg.sft.demos)]

    async def _warm_start(self) -> None:
        sft = self.cfg.sft
        demos_path = self.dir / "sft" / "demos.parquet"
        if demos_path.exists():
            demos = read_trajectories(demos_path)
        else:
            gold = resolve(sft.gold) if sft.gold else self.suite.gold_policy
            tasks = self._demo_tasks()
            with self.progress.phase("collecting demonstrations", total=None):
                agent = self.agent
                if sft.max_turns is not None:
                    agent = Agent(
                        self.engine,
                        self.tokenizer,
                        self.agent.config.model_copy(update={"max_turns": sft.max_turns}),
                    )
                episodes = await agent.run_episodes(self.env_factory, tasks, demo=gold, concurrency=16)
            demos = [e.trajectory for e in episodes if e.trajectory.outcome_reward > 0]
            if len(demos) < len(episodes):
                log.warning(
                    "%d of %d demonstrations failed their task; left out",
                    len(episodes) - len(demos),
                    len(episodes),
                )
            write_trajectories(demos_path, demos)
        t_eval = time.perf_counter()
        await self._evaluate("sft", 0)
        eval_s = time.perf_counter() - t_eval
        learner = Learner(
            self.model,
            LearnerConfig(
                lr=sft.lr,
                warmup_steps=min(20, sft.steps // 10),
                schedule="cosine",
                total_steps=sft.steps,
                micro_batch_size=sft.batch_size,
            ),
        )
        rng = random.Random(self.cfg.run.seed)
        order: list[int] = []
        pad = self.tokenizer.pad_token_id
        budget, target = self._phase_budget(), sft.steps
        t_steps, evals_s = time.perf_counter(), 0.0  # step timing, less the evaluations in it
        said = target  # the warm start's length as last printed
        with self.progress.phase("warm start (SFT)", total=sft.steps) as bar:
            step = 0
            while step < target:
                step += 1
                if step == 2:  # the first step warms up (allocations, kernels): timed from here
                    t_steps, evals_s = time.perf_counter(), 0.0
                since_probe = step - budget.probe - 1
                if budget.budget_s is not None and since_probe >= 0 and since_probe % REPLAN_EVERY == 0:
                    # Planned after `probe` steps, then again every REPLAN_EVERY steps from the
                    # mean step time so far: the first steps can run faster than the rest, and
                    # a plan from them alone takes RL's share (docs/trainer.md, time budget).
                    cut = budget.plan_sft(
                        planned=sft.steps,
                        done=step - 1,
                        step_s=(time.perf_counter() - t_steps - evals_s) / (step - 2),
                        elapsed_s=self._elapsed(),
                        eval_every=sft.eval_every,
                        eval_s=eval_s,
                    )
                    if since_probe == 0 or abs(cut.kept - target) >= max(5, target // 50):
                        # said again only when it moved by a tenth since it was last said
                        say = since_probe == 0 or abs(cut.kept - said) >= said / 10
                        target = self._record_cut(cut, bar, say=say)
                        said = target if say else said
                        self.state.sft_planned = target
                        learner.config.total_steps = target  # the cosine schedule ends with the warm start
                    if step > target:
                        break
                if len(order) < sft.batch_size:
                    order += rng.sample(range(len(demos)), len(demos))
                batch = [demos[order.pop()] for _ in range(sft.batch_size)]
                data = trajectories_to_dataproto(batch, pad).to(self.device)
                m = await asyncio.to_thread(self._in_learner_thread, learner.sft_update, data, sft.env_weight)
                self.state.sft_steps = step
                bar.advance(f"nll {m['sft/nll']:.3f}")
                if step % 25 == 0 or step == target:
                    self.metrics.log("sft", step, m)
                if sft.eval_every and step % sft.eval_every == 0 and step < target:
                    t_eval = time.perf_counter()
                    await self._push_weights()
                    await self._evaluate("sft", step)
                    eval_s = time.perf_counter() - t_eval  # the latest: evaluations grow with the policy
                    evals_s += eval_s
        await self._push_weights()
        m = await self._evaluate("sft", self.state.sft_steps)
        self.metrics.log("eval-rl", 0, m)
        self._save()

    # ---- reinforcement learning ------------------------------------------------------------
    def _limit(self) -> int:
        return dispatch_limit(self.cfg.async_, self.cfg.rollout.groups_per_step, self.state.version)

    def _elapsed(self) -> float:
        """Wall time of the run, over resumes."""
        return self.state.elapsed_s + time.time() - self._t0

    def _save(self) -> None:
        # state.elapsed_s stays the time before this session; the checkpoint holds the total.
        # Everything stored and neither trained nor dropped: the buffer, plus groups whose write
        # finished after their task was cancelled (the write runs in a thread). A resume
        # puts all of them back in the buffer.
        done = set(self.state.trained) | set(self.state.dropped)
        waiting = sorted(set(self.store.indices()) - done)
        snapshot = dataclasses.replace(self.state, elapsed_s=self._elapsed(), buffered=waiting)
        self.ckpt.save(self.model, self.tokenizer, self.learner.state_dict(), snapshot)

    async def _reinforce(self) -> None:
        cfg, a = self.cfg, self.cfg.async_
        self._split_threads()
        in_flight = max_in_flight(a, cfg.rollout.groups_per_step)
        manager = RolloutManager(
            self.agent,
            self.env_factory,
            self.task_at,
            self.buffer,
            self.store,
            group_size=cfg.rollout.group_size,
            limit=self._limit,
            max_in_flight=in_flight,
            cursor=self.state.cursor,
            redo=getattr(self, "_redo", []),
            tree=cfg.rollout.tree,
        )
        runner = asyncio.create_task(manager.run(), name="rollouts")
        budget_s = cfg.run.time_budget_min * 60 if cfg.run.time_budget_min else math.inf
        budget, first, eval_s = self._phase_budget(), self.state.version, self._last_eval_s
        try:
            with self.progress.phase(
                "reinforcement learning", total=self.rl_steps, done=self.state.version
            ) as bar:
                while self.state.version < self.rl_steps and self._elapsed() < budget_s:
                    if self.state.version == first + 1:  # the first step warms up: timed from here
                        t_steps = time.perf_counter()
                    if self.state.version == first + budget.probe and budget.budget_s is not None:
                        cut = budget.plan_rl(
                            planned=cfg.run.steps,
                            done=self.state.version,
                            step_s=(time.perf_counter() - t_steps) / (budget.probe - 1),
                            elapsed_s=self._elapsed(),
                            eval_every=cfg.run.eval_every,
                            eval_s=eval_s,
                        )
                        self.rl_steps = self._record_cut(cut, bar)
                        if self.state.version >= self.rl_steps:
                            break
                    t0 = time.perf_counter()
                    take = asyncio.create_task(
                        self.buffer.take(cfg.rollout.groups_per_step, self.state.version)
                    )
                    await asyncio.wait({take, runner}, return_when=asyncio.FIRST_COMPLETED)
                    if not take.done():  # the rollouts died: surface their error
                        take.cancel()
                        await runner
                    groups, stats = take.result()
                    wait_s = time.perf_counter() - t0
                    if a.mode == "sync" and a.partial_rollouts:
                        manager.pause()
                    t1 = time.perf_counter()
                    m = await asyncio.to_thread(self._in_learner_thread, self._update, groups)
                    train_s = time.perf_counter() - t1
                    self.state.version += 1
                    self.state.trained += [g.index for g in groups]
                    self.state.dropped += stats.dropped
                    self.state.cursor = manager.dispatched
                    t2 = time.perf_counter()
                    await self._push_weights()  # lands between two of the engine's decode steps
                    push_s = time.perf_counter() - t2
                    manager.resume()
                    await manager.notify()
                    m.update(self._rollout_metrics(groups, stats, wait_s, train_s, manager))
                    m["time/push_s"] = push_s
                    self.metrics.log("rl", self.state.version, m)
                    bar.advance(f"reward {m['rollout/reward']:.2f} · success {m['rollout/success']:.2f}")
                    v = self.state.version
                    last = v == self.rl_steps or self._elapsed() >= budget_s
                    if v % cfg.run.eval_every == 0 or last:
                        await self._evaluate("rl", v)
                    if v % cfg.run.checkpoint_every == 0 and not last:
                        self._save()
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
            await manager.close()
        self._save()  # after the rollouts stopped, so it accounts for every stored group

    def _phase_budget(self) -> PhaseBudget:
        minutes = self.cfg.run.time_budget_min
        return PhaseBudget(minutes * 60 if minutes else None, rl_share=self.cfg.run.rl_share)

    def _record_cut(self, cut: Cut, bar: Any, say: bool = True) -> int:
        """Record what the budget planned for a phase (metrics, summary) and, with `say`,
        print it; its steps."""
        self.cuts[cut.phase] = cut
        self.metrics.log(
            "budget", self.state.version if cut.phase == "rl" else self.state.sft_steps, cut.as_metrics()
        )
        if say:
            self.progress.note(cut.message())
            if cut.shortened:
                log.warning(cut.message())
        bar.total(cut.kept)
        return cut.kept

    def _in_learner_thread(self, fn: Any, *args: Any) -> Any:
        """Call `fn` on a worker thread with the learner's share of torch threads (thread-local)."""
        torch.set_num_threads(self._learner_threads)
        return fn(*args)

    def _make_engine(self, base: str, weights: str) -> InferenceEngine:
        """The generation engine `model.engine` names, holding the learner's current weights."""
        m = self.cfg.model
        if m.engine == "vllm":
            from arborl.agents.engines import VLLMEngineConfig, make_engine

            options = {"dtype": m.dtype, "enforce_eager": self.device.type == "cpu", **m.engine_options}
            return make_engine(VLLMEngineConfig(model=weights, **options))
        config = HFEngineConfig(model=base, dtype=m.dtype, device=str(self.device), **m.engine_options)
        return HFEngine(config, model=copy.deepcopy(self.model))

    def _split_threads(self) -> None:
        """Async RL runs the engine's decode thread and the learner at the same time: each gets
        half of the torch threads instead of both taking all of them (oversubscribed cores,
        slower for both). Sync RL and the warm start run one at a time, with all of them."""
        threads = self._threads  # the run's (model.torch_threads, when set)
        split = self.cfg.async_.mode == "async" and self.cfg.async_.split_threads and threads > 1
        self.engine.threads = threads // 2 if split else threads
        self._learner_threads = threads - threads // 2 if split else threads

    def _update(self, groups: list[Group]) -> dict[str, float]:
        trajs, weights = [], []
        uniform = 0
        for g in groups:
            rewards = {round(t.outcome_reward, 9) for t in g.trajectories}
            if self.cfg.algorithm.drop_uniform_groups and len(rewards) == 1:
                uniform += 1
                continue
            trajs += g.trajectories
            weights += [g.weight] * len(g.trajectories)
        metrics: dict[str, float] = {
            "batch/uniform_groups": float(uniform),
            "batch/trajectories": float(len(trajs)),
        }
        if not trajs:
            return metrics  # no learning signal in this batch: the weights stay as they are
        data = trajectories_to_dataproto(trajs, self.tokenizer.pad_token_id)
        adv, _ = compute_advantages(
            data, self.cfg.algorithm.estimator, **self.cfg.algorithm.estimator_options
        )
        data.batch["advantages"] = adv * torch.tensor(weights).unsqueeze(1)
        mask = data.batch["response_mask"].bool()
        metrics["batch/advantage_abs_mean"] = (
            float(data.batch["advantages"][mask].abs().mean()) if mask.any() else 0.0
        )
        # credit on the CPU (numba), the update on the model's device
        metrics.update(self.learner.ppo_update(data.to(self.device)))
        return metrics

    async def _push_weights(self) -> None:
        await self.engine.update_weights(self.model.state_dict())
        self._pushes += 1
        # Tokens sampled after this push carry the current version; in-flight ones, the last.
        self.agent.version_offset = self.greedy.version_offset = self.state.version - self._pushes

    def _rollout_metrics(
        self, groups: list[Group], stats: Any, wait_s: float, train_s: float, manager: RolloutManager
    ) -> dict[str, float]:
        trajs = [t for g in groups for t in g.trajectories]
        n = max(1, len(trajs))
        tokens = sum(t.num_response_tokens for t in trajs)
        truncations = Counter(t.truncation for t in trajs if t.truncation)
        out = {
            "rollout/reward": sum(t.outcome_reward for t in trajs) / n,
            "rollout/success": sum(t.outcome_reward > 0 for t in trajs) / n,
            "rollout/turns": sum(len(t.turns) for t in trajs) / n,
            "rollout/response_tokens": tokens / n,
            "rollout/gen_s": sum(t.metrics.get("gen_s", 0.0) for t in trajs) / n,
            "rollout/env_s": sum(t.metrics.get("env_s", 0.0) for t in trajs) / n,
            "rollout/tool_errors": sum(t.metrics.get("tool_errors", 0.0) for t in trajs) / n,
            "rollout/infra_failures": float(manager.stats.infra_failures),
            "staleness/mean": sum(k * c for k, c in stats.staleness.items())
            / max(1, sum(stats.staleness.values())),
            "staleness/max": float(max(stats.staleness, default=0)),
            "staleness/dropped_groups": float(len(stats.dropped)),
            "time/wait_s": wait_s,
            "time/train_s": train_s,
            "time/elapsed_s": self._elapsed(),
            "throughput/tokens_per_s": tokens / max(1e-9, wait_s + train_s),
        }
        out.update({f"staleness/hist_{k}": float(c) for k, c in stats.staleness.items()})
        out.update({f"truncated/{k}": c / n for k, c in truncations.items()})
        return out

    # ---- evaluation ------------------------------------------------------------------------
    async def _evaluate(self, phase: str, step: int) -> dict[str, float]:
        start = time.perf_counter()
        try:
            return await self._evaluate_once(phase, step)
        finally:
            self._last_eval_s = time.perf_counter() - start

    async def _evaluate_once(self, phase: str, step: int) -> dict[str, float]:
        with self.progress.phase(f"evaluating ({len(self.eval_tasks)} tasks)", total=None):
            episodes = await self.greedy.run_episodes(self.env_factory, self.eval_tasks, concurrency=16)
        m = success_metrics(episodes, self.eval_tasks)
        self.metrics.log(f"eval-{phase}", step, m)
        kinds = ", ".join(f"{k[8:]} {v:.0%}" for k, v in m.items() if k.startswith("success/"))
        self.progress.note(
            f"{phase} step {step}: success {m['success']:.0%} on {len(episodes)} held-out tasks"
            + (f" ({kinds})" if kinds else "")
        )
        self.state.best_success = max(self.state.best_success, m["success"])
        return m

    def _summary(self) -> dict[str, Any]:
        from .metrics_log import read_metrics

        events = read_metrics(self.dir)
        evals = [(e["phase"], e["step"], e["success"]) for e in events if e["phase"].startswith("eval-")]
        return {
            "run_dir": str(self.dir),
            "rl_steps": self.state.version,
            "sft_steps": self.state.sft_steps,
            "groups_trained": len(self.state.trained),
            "groups_dropped": len(self.state.dropped),
            "evals": evals,
            "initial_success": evals[0][2] if evals else None,
            "final_success": evals[-1][2] if evals else None,
            # what the time budget planned per phase (planned vs kept steps, measured step time)
            "budget": {k: dataclasses.asdict(c) for k, c in self.cuts.items()},
        }
