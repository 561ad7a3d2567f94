"""What the phases of a run share: its model, engine, agents, learner, tasks and run directory,
and the acts both phases need (evaluate, push the weights, save, plan a cut).

`RunContext.open()` builds it all (seeds, the run directory, the model and engine, a resume
from the latest checkpoint); the phases (`warm_start.WarmStart`, `reinforce.Reinforce`) then
act on it in turn, and `close()` stops the engine and the metrics sinks.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import random
import time
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch

from arborl.agents import Agent, AgentConfig
from arborl.agents.engines import InferenceEngine, SamplingParams, TrainerPolicy, make_trainer_engine
from arborl.agents.engines.adapters import AdapterMismatch, base_model_of, is_adapter_dir
from arborl.agents.engines.weights import resolve_model_dir
from arborl.agents.harnesses.runner import MiniSweAgentRunner
from arborl.kernels.attention import register_sdpa_gqa
from arborl.tasks import get_suite
from arborl.tasks.stream import task_stream

from .budget import Cut, PhaseBudget
from .buffer import Group, GroupBuffer
from .checkpoint import Checkpointer, RunState
from .config import RolloutConfig, TrainConfig
from .learner import Learner
from .lora import attach_lora, frozen_tower_modules, push_policy
from .metrics_log import MetricsLogger, read_metrics, success_metrics
from .policy import load_policy, pad_token_id, prepare_vision, tiny_model_dir
from .progress import PhaseBar, Progress
from .rollout import max_staleness
from .trajectory_store import TrajectoryStore

log = logging.getLogger(__name__)


def resolve_device(device: str) -> torch.device:
    """``auto``: the CUDA device when there is one, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class RunDirError(RuntimeError):
    """The run directory holds another run (resume it, or pick another directory)."""


class RunContext:
    """One training run's shared state; built by `open()`."""

    def __init__(self, config: TrainConfig, progress: Progress) -> None:
        self.cfg = config
        self.dir = Path(config.run.dir)
        self.progress = progress
        self.state = RunState()
        self.budget = PhaseBudget.from_minutes(config.run.time_budget_min, config.run.rl_share)
        self.pushes = 0  # engine weight updates so far (the engine counts them too)
        self.last_push_bytes = 0  # what the latest push sent the engine
        self.cuts: dict[str, Cut] = {}  # what the time budget planned for each phase
        self.last_eval_s = 0.0  # how long the latest held-out evaluation took
        self.redo: list[int] = []  # task indices a resume runs again (in flight when it stopped)
        self.stopped: str | None = None  # why a guard stopped the run (None: it was not)

    # ---- setup -----------------------------------------------------------------------------
    def open(self) -> None:
        self._t0 = time.time()
        self._seed()
        resume, latest = self._open_run_dir()
        cfg = self.cfg
        base = resolve_model_dir(cfg.model.path) if cfg.model.path else tiny_model_dir(cfg.model)
        weights = str(latest / "model") if resume and latest else base
        self._load_model(base, weights)
        base = base_model_of(base)  # model.path may be an adapter: the engine gets it as `adapter`
        weights = base if self.peft is not None else weights
        self.metrics = MetricsLogger(self.dir, wandb=cfg.run.wandb, config=cfg.model_dump(by_alias=True))
        self.store = TrajectoryStore(self.dir / "trajectories")
        self._load_tasks()
        self.engine = self._make_engine(base, weights)
        self._make_agents()
        self._make_learner()
        if resume:
            self._restore(latest)

    def _seed(self) -> None:
        """Torch threads and the Python, NumPy and torch seeds."""
        cfg = self.cfg
        if cfg.model.torch_threads:
            torch.set_num_threads(cfg.model.torch_threads)
        self.threads = self.learner_threads = torch.get_num_threads()
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
        """The tokenizer (from `base`; a vision-language model's processor) and the policy (from
        `weights`) on the run's device."""
        from arborl.agents.vision import load_policy_tokenizer

        self.tokenizer = load_policy_tokenizer(base)
        self.pad_token_id = pad_token_id(self.tokenizer)
        self._load_weights(base, weights)
        #: a VLM's M-RoPE positions for its batches (None: a text model); its tower frozen
        #: before the learner's optimiser is built, with model.freeze_vision
        self.rope_index = prepare_vision(self.model, self.cfg.model.freeze_vision)

    def _load_weights(self, base: str, weights: str) -> None:
        self.device = resolve_device(self.cfg.model.device)
        lora = self.cfg.model.lora
        #: LoRA: the PeftModel around `model` (the adapter, save_pretrained), and the adapter
        #: directory the run starts from (a resumed checkpoint's, or model.path's); else None
        self.peft: Any = None
        self.adapter = weights if is_adapter_dir(weights) else None
        if not lora.enabled:
            if self.adapter:
                raise AdapterMismatch(
                    f"{weights} holds a LoRA adapter, and model.lora.r is 0 (full weights): set "
                    "model.lora as the adapter was trained (its adapter_config.json has r and alpha)"
                )
            self.model = self._from_pretrained(weights)
            return
        if weights != base and not self.adapter:
            raise AdapterMismatch(
                f"{weights} holds full weights, not a LoRA adapter, and model.lora.r={lora.r}: resume "
                "this run with model.lora.r=0, or start a new run.dir"
            )
        self.model = self._from_pretrained(base_model_of(base))
        frozen = frozen_tower_modules(self.model, self.cfg.model.freeze_vision)
        self.peft = attach_lora(
            self.model, lora, adapter=self.adapter, exclude=frozen
        )  # injected into `model`

    def _from_pretrained(self, weights: str) -> Any:
        # Grouped-query attention without repeating the key/value heads on CPU (the engine's
        # default too; same logits and gradients as transformers' sdpa, kernels/attention.py).
        attn = register_sdpa_gqa()
        return load_policy(weights, getattr(torch, self.cfg.model.dtype), attn).to(self.device)

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

    def _make_engine(self, base: str, weights: str) -> InferenceEngine:
        """The generation engine `model.engine` names (the engine registry builds it),
        holding the learner's current weights."""
        m = self.cfg.model
        policy = TrainerPolicy(
            base, weights, m.dtype, str(self.device), self.model, lora_rank=m.lora.r, adapter=self.adapter
        )
        return make_trainer_engine(m.engine, policy, m.engine_options)

    def _make_agents(self) -> None:
        """The sampling agent (rollouts) and the greedy one (evaluations) over the engine."""
        ro = self.cfg.rollout
        # seeded: a run repeats its rollouts (each episode of a group draws its own noise)
        sampling = SamplingParams(temperature=ro.temperature, top_p=ro.top_p, seed=self.cfg.run.seed)
        budgets: dict[str, Any] = {"max_turns": ro.max_turns, "max_new_tokens": ro.max_new_tokens}
        budgets["max_context_tokens"] = ro.max_context_tokens
        budgets["context"] = ro.context
        self.agent = Agent(self.engine, self.tokenizer, AgentConfig(sampling=sampling, **budgets))
        self.greedy = Agent(
            self.engine, self.tokenizer, AgentConfig(sampling=SamplingParams(temperature=0), **budgets)
        )
        # What drives the RL episodes: the same Agent, or an external harness through the gateway.
        self.rollouts: Agent | MiniSweAgentRunner = self.agent
        if ro.harness == "mini_swe_agent":
            self.rollouts = mini_swe_agent_runner(self.engine, self.tokenizer, ro)

    def _make_learner(self) -> None:
        """The learner (its KL reference comes at RL's start: `anchor_reference`) and the
        group buffer."""
        cfg, ro = self.cfg, self.cfg.rollout
        learner_cfg = cfg.learner.model_copy(update={"temperature": ro.temperature})
        self.learner = Learner(self.model, learner_cfg)
        self.buffer = GroupBuffer(
            capacity=max(2 * ro.groups_per_step, cfg.async_.max_groups_in_flight),
            max_staleness=max_staleness(cfg.async_),
            stale=cfg.async_.stale,
            decay=cfg.async_.stale_decay,
            # sync mode takes the first groups to finish (with partial rollouts, the others
            # resume under the next version); the order matters where groups run ahead
            order=cfg.async_.order if cfg.async_.mode == "async" else "arrival",
        )

    def anchor_reference(self) -> None:
        """With `learner.use_kl_loss`, freeze the KL's reference policy: the policy as RL starts
        (after the warm start, if any). Its weights are kept in the run directory
        (`reference/`) the first time, so that a resumed run anchors to the same policy."""
        if not self.cfg.learner.use_kl_loss:
            return
        path = self.dir / "reference"
        if (path / "config.json").exists():
            ref = self._from_pretrained(str(path))
        else:
            if self.state.version > 0:
                log.warning(
                    "%s has no reference/ (a run from before it was kept): the KL anchors to the "
                    "policy at RL step %d, where this session resumes",
                    self.dir,
                    self.state.version,
                )
            # with LoRA, the adapter merged into a copy: a plain model that loads back as one
            ref = copy.deepcopy(self.peft).merge_and_unload() if self.peft else copy.deepcopy(self.model)
            tmp = path.with_name("reference.tmp")
            ref.save_pretrained(tmp)
            tmp.replace(path)
        self.learner.set_reference(ref)

    def stop(self, reason: str) -> None:
        """Record that a guard stopped the run (metrics `stopped` event, summary.json) and say
        why."""
        self.stopped = reason
        self.metrics.log("stopped", self.state.version, {"reason": reason})
        self.progress.note(f"stopped: {reason}")
        log.warning("run stopped: %s", reason)

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
        self.redo = [i for i in range(cursor) if i not in stored and i not in done]
        self.state.cursor = cursor
        # the dispatch limit counts every index dispatched: dropped groups keep their
        # replacements, and the redone groups are waited for in dispatch order
        self.buffer.dropped = len(self.state.dropped)
        for index in self.redo:
            self.buffer.expect(index)
        self.agent.version_offset = self.greedy.version_offset = self.state.version
        self.rollouts.version_offset = self.state.version
        log.info(
            "resumed %s at version %d: %d groups back in the buffer, %d to run again",
            path.name if path else "a run without checkpoints",
            self.state.version,
            len(stored - done),
            len(self.redo),
        )

    async def close(self) -> None:
        if isinstance(self.rollouts, MiniSweAgentRunner):
            await self.rollouts.aclose()  # its gateway first: it serves the engine
        await self.engine.close()
        self.metrics.close()

    # ---- what both phases do ---------------------------------------------------------------
    def elapsed(self) -> float:
        """Wall time of the run, over resumes."""
        return self.state.elapsed_s + time.time() - self._t0

    def has_eval(self, phase: str, step: int) -> bool:
        return any(
            e.get("phase") == f"eval-{phase}" and e.get("step") == step for e in read_metrics(self.dir)
        )

    def in_learner_thread(self, fn: Any, *args: Any) -> Any:
        """Call `fn` on a worker thread with the learner's share of torch threads (thread-local)."""
        torch.set_num_threads(self.learner_threads)
        return fn(*args)

    async def push_weights(self) -> None:
        """Send the engine the current policy: the adapter alone with LoRA, else the weights."""
        self.last_push_bytes = await push_policy(self.engine, self.model, self.peft)
        self.pushes += 1
        # Tokens sampled after this push carry the current version; in-flight ones, the last.
        self.agent.version_offset = self.greedy.version_offset = self.state.version - self.pushes
        self.rollouts.version_offset = self.agent.version_offset

    def save(self) -> None:
        # state.elapsed_s stays the time before this session; the checkpoint holds the total.
        # Everything stored and neither trained nor dropped: the buffer, plus groups whose write
        # finished after their task was cancelled (the write runs in a thread). A resume
        # puts all of them back in the buffer.
        done = set(self.state.trained) | set(self.state.dropped)
        waiting = sorted(set(self.store.indices()) - done)
        snapshot = dataclasses.replace(self.state, elapsed_s=self.elapsed(), buffered=waiting)
        self.ckpt.save(self.peft or self.model, self.tokenizer, self.learner.state_dict(), snapshot)

    def record_cut(self, cut: Cut, bar: PhaseBar, say: bool = True) -> None:
        """Record what the budget planned for a phase (metrics, summary) and, with `say`,
        print it."""
        self.cuts[cut.phase] = cut
        self.metrics.log(
            "budget", self.state.version if cut.phase == "rl" else self.state.sft_steps, cut.as_metrics()
        )
        if say:
            self.progress.note(cut.message())
            if cut.shortened:
                log.warning(cut.message())
        bar.total(cut.kept)

    async def evaluate(self, phase: str, step: int) -> dict[str, float]:
        start = time.perf_counter()
        try:
            return await self._evaluate_once(phase, step)
        finally:
            self.last_eval_s = time.perf_counter() - start

    async def _evaluate_once(self, phase: str, step: int) -> dict[str, float]:
        with self.progress.phase(f"evaluating ({len(self.eval_tasks)} tasks)", total=None):
            episodes = await self.greedy.run_episodes(self.env_factory, self.eval_tasks, concurrency=16)
        m = success_metrics(episodes, self.eval_tasks, self.suite)
        self.metrics.log(f"eval-{phase}", step, m)
        kinds = ", ".join(f"{k[8:]} {v:.0%}" for k, v in m.items() if k.startswith("success/"))
        self.progress.note(
            f"{phase} step {step}: success {m['success']:.0%} on {len(episodes)} held-out tasks"
            + (f" ({kinds})" if kinds else "")
        )
        self.state.best_success = max(self.state.best_success, m["success"])
        return m

    def summary(self) -> dict[str, Any]:
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
            "stopped": self.stopped,  # why a guard stopped RL (None: it ran its course)
        }


def mini_swe_agent_runner(engine: InferenceEngine, tokenizer: Any, ro: RolloutConfig) -> MiniSweAgentRunner:
    """mini-swe-agent through the gateway, with the rollout budgets as its limits."""
    from arborl.agents.gateway import GatewayConfig
    from arborl.agents.harnesses.mini_swe_agent import MiniSweAgentConfig

    gateway = GatewayConfig(max_new_tokens=ro.max_new_tokens, max_context_tokens=ro.max_context_tokens)
    config = MiniSweAgentConfig(
        step_limit=ro.max_turns,
        max_tokens=ro.max_new_tokens,
        temperature=ro.temperature,
        model_kwargs={"top_p": ro.top_p},
    )
    return MiniSweAgentRunner(engine, tokenizer, gateway, config)
