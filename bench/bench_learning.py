"""Does step credit or tree rollouts learn more than GRPO? At equal generated tokens.

The suite: `tool-maze` (arborl.tasks.toy.tool_maze), or with `--suite` `tool-doors` (the same
doors behind a stateful `door(colour)` tool: nothing to copy, nothing to guess, the colour
said in the question) or `tool-mix-houses` (the main job's houses: blue leads on, unsaid,
and the demonstrator's walker tries red first two times in three; start it from the main
job's warm start with `--init`), or `tool-cues` (issue 50's benchmark: six cued rooms a
house, the cue's door by a rule nothing states, 10 turns; `tool-cues-single` its control,
blue always). In the door suites: three door
decisions per task, a wrong door costs a turn of a budget that tolerates one, every episode
of a task starts in one state and the states after right doors recur. One warm start is shared by every run: the tiny model
(the main job's sizes) trained on demonstrations of a random explorer (a door at random,
back after a dead end; collected with room for every detour, so none is filtered out), which
teaches the format and the tools but not which door leads on. Then, from it, four modes:

    grpo          8 independent episodes a task, GRPO (outcome) advantages
    gigpo         the same episodes, GiGPO (episode + step advantages at recurring states)
    tree+tree     rollout trees (8 leaves, 2 roots, forks at turns and uncertain tokens),
                  the tree estimator (a node's value from the leaves below it)
    tree+gigpo    the same trees, GiGPO advantages
    oracle        the same episodes as grpo, each turn told by the env whether it was right
                  (`oracle_step`: the best any step credit can do; tool-cues only). If it
                  cannot beat GRPO, the benchmark cannot show step credit

Every mode runs until it has generated as many tokens as GRPO's run of the same seed (GRPO
runs `--steps` steps, first in each seed's round; tree leaves share their prefixes, so a
tree mode takes more steps for the same tokens), seeds interleaved (seed 0 of every mode,
then seed 1, ...). Seed i is the run seed of every mode of round i (its rollouts' sampling
seed) and picks round i's training task stream (`tasks.seed = i`): the modes of a seed see
the same tasks in the same order, so the comparison stays paired, and the interval over seeds
includes which tasks a run drew; the held-out tasks are the same for all.
Held-out success is sampled at the rollout temperature (64 tasks x `--samples`) before RL
and after every run; each mode's difference against GRPO is paired by seed, with a 95 %
t interval. Also: RL steps and optimizer steps (PPO mini-batch updates: a tree mode's
smaller steps make more of them for the same tokens), tokens generated per trajectory, the
fraction of uniform groups (no signal for GRPO), the PPO clip fraction, RL wall clock.
`--kl-coef` (a KL to the warm start, `--kl-type` its estimator) and `--entropy-coeff` add
verl's loss terms, `--warmup-steps` a linear learning-rate warm-up (Adam's first steps move
every weight by about the full rate whatever its gradient); a run whose entropy explodes is stopped by the trainer's guard
(`run.entropy_guard`) and marked in the table.

    python bench/bench_learning.py [--suite tool-maze|tool-doors|tool-mix-houses|tool-cues] [--quick] [--seeds 5]
                                   [--steps 60] [--sft-steps 300]
                                   [--kl-coef 0.001 --kl-type low_var_kl] [--entropy-coeff 0.001] [--warmup-steps 10]
                                   [--init RUN_OR_MODEL] [--modes grpo,gigpo,tree+tree,tree+gigpo,oracle]

Any other registered suite runs too (e.g. issue 34's `sokoban-6x6`): name its training stream
(`--train 'module:fn'`, called as fn(n, seed, **--train-options), never the held-out tasks)
and, where they differ from the toy suites', its budgets (`--max-turns`, `--max-new-tokens`,
`--max-context-tokens`, `--context`), the warm start's demonstrator (`--demo`; default the suite's gold
policy) and the env (`--env-id`; default the suite's, used for training and held-out alike).
Sokoban's prompt is some 750 tokens of the tiny tokenizer on the first turn and 1,100 after
(verl-agent's template, the room and the last two rooms each turn), so a whole 15-turn episode
is some 16k tokens. Two ways to run it: with verl-agent's prompt every turn, `--context
sliding_window --max-context-tokens 2048` (the opening prompt and the newest turn, which
carries the last two observations as verl-agent's prompt does; the tiny model has 4096
positions; no tree modes); or in a chat that keeps its turns, `--env-id arborl/SokobanChat-v0
--tokenizer-text arborl.tasks.sokoban.suite:tokenizer_text --max-context-tokens 2560` (verl-
agent's first prompt, then each new board alone: a whole episode is under 2,000 tokens, so
every mode, trees included, runs with `--context truncate`).
`--gigpo-options '{"enable_similarity": true}'` passes options to both GiGPO modes'
estimator (`episode_norm`, `enable_similarity`, `similarity_thresh`, ...), `--tree-options
'{"reweight": "sqrt"}'` to tree + tree's. The table also
reports GiGPO's anchor groups in every mode's batches: the fraction of turns in a group of
more than one, and the mean group size (singletons only: GiGPO is GRPO by construction).

Writes bench/results/learning.md and docs/trainer-learning-modes.png (`--tag T`: learning-T.md, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench_trainer import main_job_model, slug, t975

from arborl.tasks.suites import get_suite, list_suites, load_builtin_suites, register_suite, resolve
from arborl.trainer.local.config import TrainConfig
from arborl.trainer.local.metrics_log import read_metrics
from arborl.trainer.local.reinforce import Reinforce
from arborl.trainer.local.run_context import RunContext
from arborl.trainer.local.trainer import Trainer

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DOCS = HERE.parent / "docs"


# What a run's record keeps of its metrics: the table's and the figure's inputs, and what a
# failed run is read by (entropy, gradient norm, advantage size, reply length), and the reason
# of a `stopped` event (the entropy guard).
RECORD_KEYS = (
    "phase", "step", "time", "rolled_back", "bench/generated_total", "bench/generated_tokens",
    "batch/uniform_group_fraction", "batch/uniform_groups", "batch/advantage_abs_mean",
    "anchors/turns_shared", "anchors/group_size", "anchors/turns_recurring", "anchors/turns_repeated",
    "anchors/step_nonzero", "actor/pg_clipfrac", "actor/pg_clipfrac_max",
    "actor/entropy", "actor/grad_norm", "actor/ppo_kl", "actor/pg_loss", "actor/kl_loss",
    "actor/updates", "bench/optimizer_steps", "rollout/reward", "rollout/success",
    "rollout/response_tokens", "rollout/turns", "reason",
)  # fmt: skip


def records_dir(tag: str) -> Path:
    """Where each finished run's record lies (committed: a session's machine does not keep
    `--out`, so seeds add up across sessions only through these)."""
    return RESULTS / f"learning{f'-{tag}' if tag else ''}-runs"


def model_digest(model: str) -> str:
    """The warm start's weights, hashed: runs from different warm starts must not be pooled."""
    h = hashlib.sha256()
    for f in sorted(Path(model).glob("*.safetensors")) or sorted(Path(model).glob("*.bin")):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def save_record(path: Path, run_dir: Path, after: float) -> None:
    events = [
        {
            k: (float(f"{v:.7g}") if isinstance(v, float) and k != "time" else v)
            for k, v in e.items()
            if k in RECORD_KEYS
        }
        for e in read_metrics(run_dir)
        if e["phase"] in ("rl", "stopped") or (e["phase"] == "eval-rl" and e["step"] == 0)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"after": after, "events": events}, separators=(",", ":")) + "\n")


def load_record(path: Path) -> tuple[float, list[dict[str, Any]], dict[str, float]]:
    """A record's held-out success after RL, its metrics, and its table numbers: from the
    metrics, or as kept (`stats`) for a run whose metrics were lost before records existed."""
    rec = json.loads(path.read_text())
    stats = rec["stats"] if "stats" in rec else run_stats(rec["events"])
    return float(rec["after"]), rec["events"], {k: float(v) for k, v in stats.items()}


def check_start(tag: str, digest: str, before: float | None) -> float | None:
    """The warm start of the runs already recorded against this one: the same weights (or,
    for records kept before digests were, the same sampled held-out success `before`), else a
    clear error. The recorded held-out success; None: no records, or one `before` must decide."""
    start = records_dir(tag) / "start.json"
    if not start.exists():
        return None
    rec = json.loads(start.read_text())
    if not rec.get("digest") and before is None:
        return None
    if rec.get("digest") == digest or (not rec.get("digest") and before == rec["before"]):
        return float(rec["before"])
    raise SystemExit(
        f"{start}: its runs started from another warm start (digest {rec.get('digest')}, "
        f"held-out {rec['before']:.1%}; this one: digest {digest}"
        f"{'' if before is None else f', {before:.1%}'}); remake the same warm start, or move "
        "the records away to start over"
    )


def outputs(tag: str) -> tuple[Path, Path]:
    """The table and the figure, `--tag` in their names (another budget's run beside the
    default one)."""
    suffix = f"-{tag}" if tag else ""
    return RESULTS / f"learning{suffix}.md", DOCS / f"trainer-learning-modes{suffix}.png"


TREE = {"leaves": 8, "roots": 2}
# the suites it runs on: their training streams (with generator options) and the warm
# start's demonstrator (with the demonstrations' own stream options)
# the cued houses' stream and walker, shared by their suites (the suite names the env's view)
_CUES: dict[str, Any] = {
    "train": "arborl.tasks.toy.tool_cues:generate_cue_tasks",
    "demo": "arborl.tasks.toy.tool_cues:explore_policy",
    "max_turns": 10,
    "demo_max_turns": 18,
    "labels": True,  # the door tool labels each turn (Turn.step_label): the oracle mode runs
}
SUITES: dict[str, dict[str, Any]] = {
    "tool-maze": {
        "train": "arborl.tasks.toy.tool_maze:generate_maze_tasks",
        "demo": "arborl.tasks.toy.tool_maze:explore_policy",
    },
    "tool-doors": {
        "train": "arborl.tasks.toy.tool_doors:generate_door_tasks",
        "demo": "arborl.tasks.toy.tool_doors:explore_policy",
    },
    # the main job's houses: blue leads on, unsaid; the walker's habit is red
    "tool-mix-houses": {
        "train": "arborl.tasks.toy.tool_mix:generate_mix_tasks",
        "options": {"doors": 1.0},
        "demo": "arborl.tasks.toy.tool_mix:demo_policy",
        "demo_options": {"lead": "any"},
    },
    # issue 50's houses of cued rooms: six doors to find, four wrong ones tolerated; the walker
    # opens a random unlocked door (18 turns: it always finishes, none of its walks filtered)
    "tool-cues": _CUES,
    # tool-cues with each cue drawn, never named (issue 52 §7, for --vlm): the door to open is
    # in the pixels alone; the walker's demonstrations read only the words, as on tool-cues
    "tool-cues-image": _CUES,
    # its control: every picture the bare wall (no policy can beat the walker)
    "tool-cues-image-blank": _CUES,
    # the control: blue opens every door whatever the cue (step credit has nothing to add)
    "tool-cues-single": {**_CUES, "options": {"single": True}},
}
MODES: dict[str, dict[str, Any]] = {
    "grpo": {"algorithm": {"estimator": "grpo"}},
    "gigpo": {"algorithm": {"estimator": "gigpo"}},
    "tree+tree": {"algorithm": {"estimator": "tree"}, "rollout": {"tree": TREE}},
    "tree+gigpo": {"algorithm": {"estimator": "gigpo"}, "rollout": {"tree": TREE}},
    # the control that says whether the benchmark can show step credit at all: each turn told
    # by the env whether it was right (suites whose env labels its steps: tool-cues)
    "oracle": {"algorithm": {"estimator": "oracle_step"}},
}


class TokenBudgetReinforce(Reinforce):
    """RL that stops once the run has generated `budget` tokens (evaluating at that step, as
    at the last). Tree leaves count their share of the tree's sampled tokens
    (`metrics.generated_tokens`), independent episodes their response tokens."""

    def __init__(self, ctx: RunContext, budget: float | None) -> None:
        super().__init__(ctx)
        # a run resumed from a checkpoint goes on from the tokens its kept steps generated
        # (the trainer has marked the steps after the checkpoint rolled back)
        kept = [e for e in read_metrics(ctx.dir) if e["phase"] == "rl" and "bench/generated_total" in e]
        self.budget, self.generated = budget, float(kept[-1]["bench/generated_total"]) if kept else 0.0
        if budget is not None and self.generated >= budget:  # it had stopped at its budget
            ctx.cfg.run.steps = self.pacer.target = ctx.state.version

    def rollout_metrics(self, groups: list[Any], *args: Any, **kwargs: Any) -> dict[str, float]:
        m = super().rollout_metrics(groups, *args, **kwargs)
        trajs = [t for g in groups for t in g.trajectories]
        tokens = sum(t.metrics.get("generated_tokens", t.num_response_tokens) for t in trajs)
        self.generated += tokens
        m["bench/generated_tokens"] = tokens / max(1, len(trajs))
        m["bench/generated_total"] = self.generated
        # the RL learner's optimizer steps so far (PPO mini-batch updates; skipped ones not)
        m["bench/optimizer_steps"] = float(self.ctx.learner.steps)
        if self.budget is not None and self.generated >= self.budget:
            # this step is the last (and evaluated): the phase's target, and the config's
            self.ctx.cfg.run.steps = self.pacer.target = self.ctx.state.version
        return m


class TokenBudgetTrainer(Trainer):
    """A run whose RL phase is `TokenBudgetReinforce`."""

    def __init__(self, config: TrainConfig, budget: float | None) -> None:
        super().__init__(config)
        self.budget = budget

    def reinforce(self, ctx: RunContext) -> Reinforce:
        return TokenBudgetReinforce(ctx, self.budget)


def config(run_dir: Path, args: argparse.Namespace, **over: Any) -> TrainConfig:
    cfg: dict[str, Any] = {
        # --vlm: the tiny Qwen2-VL, model.tiny its text half (an --init model is what it is)
        "model": {"tiny": tiny_model(args), **({"tiny_vlm": True} if getattr(args, "vlm", False) else {})},
        "tasks": {"train": args.train, "train_options": args.train_options, "eval_suite": args.suite},
        "rollout": {
            "env_id": args.env_id,
            "group_size": 8,
            "groups_per_step": 4,
            "max_turns": args.max_turns,  # the toy suites' budget: one detour
            "max_new_tokens": args.max_new_tokens,
            "max_context_tokens": args.max_context_tokens,
            "context": args.context,
            "temperature": args.temperature,
        },
        # sync: every sample from the current weights, so the modes differ only in credit and
        # rollouts; two mini-batches a batch (verl's ratio), so the clip engages
        "async": {"mode": "sync", "partial_rollouts": False},
        "learner": {"lr": args.lr, "micro_batch_size": 16, "ppo_mini_batch_size": 2},
        "run": {
            "dir": str(run_dir),
            "steps": 0,
            "eval_every": 10_000,
            "checkpoint_every": args.checkpoint_every,
        },
    }
    for key, value in over.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    algorithm = cfg.get("algorithm", {})
    if algorithm.get("estimator") == "gigpo":
        cfg["algorithm"] = {**algorithm, "estimator_options": args.gigpo_options}
    elif algorithm.get("estimator") == "tree":
        cfg["algorithm"] = {**algorithm, "estimator_options": args.tree_options}
    elif algorithm.get("estimator") == "oracle_step":  # its episode term normalised as GiGPO's
        shared = {k: v for k, v in args.gigpo_options.items() if k in ("mode", "episode_norm")}
        cfg["algorithm"] = {**algorithm, "estimator_options": shared}
    return TrainConfig.model_validate(cfg)


def run_config(args: argparse.Namespace, run_dir: Path, model: str, mode: str, seed: int) -> TrainConfig:
    """The RL run of `mode` and seed `seed` from the warm start `model`: run seed `seed` (its
    rollouts' sampling), the seed's training stream, the loss terms of the flags."""
    steps = args.steps if mode == "grpo" else int(args.steps * args.max_steps_factor)
    return config(
        run_dir,
        args,
        model={"path": model},
        run={"steps": steps, "seed": seed},
        tasks={"seed": task_seed(seed, args.task_streams)},
        learner=stability(args),
        **MODES[mode],
    )


PER_SEED = "per-seed"


def task_seed(seed: int, streams: str = PER_SEED) -> int:
    """`tasks.seed` of run seed `seed`: each seed its own training stream, shared by every mode
    of the seed (the comparison stays paired), so the interval over seeds includes which tasks
    a run drew. ``shared``: seed 0's stream for all (benchmarks recorded before)."""
    return seed if streams == PER_SEED else 0


def stability(args: argparse.Namespace) -> dict[str, Any]:
    """The learner's KL and entropy terms from `--kl-coef`, `--kl-type`, `--entropy-coeff`."""
    return {
        "use_kl_loss": args.kl_coef > 0,
        "kl_loss_coef": args.kl_coef,
        "kl_loss_type": args.kl_type,
        "entropy_coeff": args.entropy_coeff,
        "warmup_steps": getattr(args, "warmup_steps", 0),
    }


def tiny_model(args: argparse.Namespace) -> dict[str, Any]:
    """`model.tiny`: the size `--model` names, its tokenizer trained on `--tokenizer-text`."""
    tiny = main_job_model() if args.model == "main" else {}
    if args.tokenizer_text:
        tiny["domain_text"] = [args.tokenizer_text]
    return tiny


def suite_settings(args: argparse.Namespace) -> None:
    """Fill the suite-dependent arguments left unset: the toy suites' presets (`SUITES`), else
    the suite's own (gold policy, turn budget); a suite without a preset needs `--train`.
    With `--env-id`, the held-out suite is a copy of the suite on that env (this process only)."""
    preset = SUITES.get(args.suite, {})
    if args.train is None:
        if not preset and not args.report:
            raise SystemExit(
                f"suite {args.suite!r} has no preset here: name its training stream with --train "
                "'module:fn' (a generator of tasks, not the held-out suite)"
            )
        args.train = preset.get("train")
    args.train_options = json.loads(args.train_options) if args.train_options else preset.get("options", {})
    args.demo_options = preset.get("demo_options") if args.demo is None else None
    args.demo = args.demo or preset.get("demo")
    suite = get_suite(args.suite)
    args.max_turns = args.max_turns or preset.get("max_turns", 5 if preset else suite.max_turns)
    # the toy suites' explorer finishes every random walk in 7 turns: none filtered for its doors
    args.demo_max_turns = args.demo_max_turns or preset.get("demo_max_turns", 7 if preset else args.max_turns)
    args.gigpo_options = json.loads(args.gigpo_options or "{}")
    args.tree_options = json.loads(args.tree_options or "{}")
    if args.heldout:
        suite = register_suite(
            dataclasses.replace(
                suite,
                name=f"{suite.name}-heldout{args.eval_size}",
                loader=heldout_loader(args),
                description=f"{args.heldout} {args.heldout_options or ''}",
            ),
            force=True,
        )
        args.suite = suite.name
    if args.env_id and args.env_id != suite.env_id:
        args.suite = register_suite(
            dataclasses.replace(suite, name=f"{suite.name}@{args.env_id}", env_id=args.env_id), force=True
        ).name


def heldout_loader(args: argparse.Namespace) -> Any:
    """`--heldout`'s tasks, once checked to share no task with the first `4 x --eval-size` of
    any seed's training stream (a stream that cycles its games, as TextWorld's does, shows
    them all)."""
    options = json.loads(args.heldout_options or "{}")

    def load() -> list[Any]:
        tasks = list(resolve(args.heldout)(args.eval_size, **options))
        seeds = {task_seed(s) for s in range(args.seeds)} | {0}  # 0: the warm start's stream
        trained = {
            t.id for s in seeds for t in resolve(args.train)(4 * args.eval_size, s, **args.train_options)
        }
        shared = sorted({t.id for t in tasks} & trained)
        if shared:
            raise SystemExit(f"--heldout shares tasks with the training stream: {shared[:5]}")
        return tasks

    return load


def warm_start(args: argparse.Namespace) -> str:
    """The explorer's demonstrations, `--sft-steps` of SFT; the checkpoint's model dir."""
    warm = args.out / "warm"
    sft = {
        "steps": args.sft_steps,
        "demos": 200 if args.quick else 4000,
        "batch_size": args.sft_batch,
        "micro_batch_size": getattr(args, "sft_micro_batch", None),
        "lr": args.sft_lr,
        "env_weight": args.sft_env_weight,
        "gold": args.demo,
        "train_options": args.demo_options,
        "max_turns": args.demo_max_turns,
    }
    cfg = config(warm, args, sft=sft)
    asyncio.run(Trainer(cfg).run())
    return str(sorted((warm / "checkpoints").glob("step-*"))[-1] / "model")


def sampled_success(model: str, args: argparse.Namespace, out: Path) -> float:
    """Held-out success at the rollout temperature: 64 tasks x `--samples`, the
    suite's 5-turn budget."""
    from arborl.eval.config import EvalConfig
    from arborl.eval.runner import run_eval

    cfg = EvalConfig.model_validate(
        {
            "suite": args.suite,
            "agent": "model",
            "samples": args.samples,
            "pass_k": [1],
            "limit": args.eval_size,
            "concurrency": 32,
            "max_turns": args.max_turns,
            "model": {
                "path": model,
                "temperature": args.temperature,
                "max_new_tokens": args.max_new_tokens,
                "max_context_tokens": args.max_context_tokens,
                "context": args.context,
                "seed": 0,
            },
            "run": {"dir": str(out), "resume": False},
            "report": False,
        }
    )
    return float(asyncio.run(run_eval(cfg)).summary["resolved_rate"])


def _mean_of(values: list[Any]) -> float:
    """Mean of the values logged (None: a step without it); NaN when none was."""
    logged = [float(v) for v in values if v is not None]
    return statistics.mean(logged) if logged else math.nan


def run_stats(metrics: list[dict[str, Any]]) -> dict[str, float]:
    """The table's numbers of one run, from its metrics (a run dir's, or its record's)."""
    events = [e for e in metrics if e["phase"] == "rl" and not e.get("rolled_back")]
    start = next(e["time"] for e in metrics if e["phase"] == "eval-rl" and e["step"] == 0)
    mean = lambda k: statistics.mean(e.get(k, 0.0) for e in events) if events else 0.0  # noqa: E731
    logged = lambda k: any(k in e for e in events)  # noqa: E731
    return {
        "steps": float(len(events)),
        # optimizer steps (PPO mini-batch updates; a batch without signal makes none): the
        # learner's count; NaN for runs from before records kept it
        "updates": max(e["bench/optimizer_steps"] for e in events if "bench/optimizer_steps" in e)
        if logged("bench/optimizer_steps")
        else math.nan,
        # ended by a guard (the entropy guard: run.entropy_guard), not resumed past it since
        "stopped": float(
            any(
                e["phase"] == "stopped" and e["step"] >= (events[-1]["step"] if events else 0)
                for e in metrics
            )
        ),
        "tokens": events[-1]["bench/generated_total"] if events else 0.0,
        "tokens_per_traj": mean("bench/generated_tokens"),
        # older runs logged only the dropped groups' count (all uniform ones, of 4 a step)
        "uniform": mean("batch/uniform_group_fraction")
        if logged("batch/uniform_group_fraction")
        else mean("batch/uniform_groups") / 4,
        # NaN for runs from before the trainer logged them
        "anchor_shared": mean("anchors/turns_shared") if logged("anchors/turns_shared") else math.nan,
        "anchor_size": mean("anchors/group_size") if logged("anchors/group_size") else math.nan,
        # of the shared turns, those whose state recurs across the group's episodes (the rest:
        # one episode repeating itself in place), and the turns GiGPO's step term moves
        "anchor_recurring": mean("anchors/turns_recurring")
        if logged("anchors/turns_recurring")
        else math.nan,
        "step_nonzero": mean("anchors/step_nonzero") if logged("anchors/step_nonzero") else math.nan,
        "clip": mean("actor/pg_clipfrac"),
        "seconds": (max(e["time"] for e in events) - start) if events else 0.0,
        # the policy's token entropy (nats) over the first and the last five steps: a run whose
        # entropy climbs is read here (issue 50 §7); NaN for runs that logged none
        "entropy_first": _mean_of([e.get("actor/entropy") for e in events[:5]]),
        "entropy_last": _mean_of([e.get("actor/entropy") for e in events[-5:]]),
        "reward_first": statistics.mean(e["rollout/reward"] for e in events[:5]) if events else 0.0,
        "reward_last": statistics.mean(e["rollout/reward"] for e in events[-5:]) if events else 0.0,
        # how fast, within the run: the tokens generated by the first step whose rollouts
        # succeed 90 % of the time (NaN: never)
        "to90": next(
            (e["bench/generated_total"] for e in events if e["rollout/success"] >= 0.9), float("nan")
        ),
    }


def stability_text(args: argparse.Namespace) -> str:
    """The KL and entropy terms and the learning-rate warm-up, as the table's header states
    them ('' when all are off)."""
    kl = getattr(args, "kl_coef", 0.0)
    terms = [f"KL to the warm start {kl:g} ({args.kl_type})"] if kl else []
    if getattr(args, "entropy_coeff", 0.0):
        terms.append(f"entropy bonus {args.entropy_coeff:g}")
    text = f"Loss terms: {', '.join(terms)}. " if terms else ""
    if getattr(args, "warmup_steps", 0):
        text += f"Learning rate warmed up over the first {args.warmup_steps} optimizer steps. "
    return text


def interval(diffs: list[float]) -> tuple[float, float]:
    """Mean of paired differences and the half-width of its 95 % t interval."""
    if len(diffs) < 2:
        return (diffs[0] if diffs else 0.0), float("nan")
    return statistics.mean(diffs), t975(len(diffs) - 1) * statistics.stdev(diffs) / len(diffs) ** 0.5


def plot(
    runs: dict[str, list[list[dict[str, Any]]]], after: dict[str, list[float]], before: float, out_png: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    colors = dict(zip(MODES, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"), strict=True))
    for name, metrics in runs.items():
        curves = []
        for m in metrics:
            ev = [e for e in m if e["phase"] == "rl" and not e.get("rolled_back")]
            xs = [e["bench/generated_total"] / 1000 for e in ev]
            # unsmoothed: a running mean over steps would lag more for the mode with fewer,
            # larger steps (GRPO's step costs about three of a tree mode's)
            ys = [e["rollout/success"] * 100 for e in ev]
            if ev:  # a record kept without its metrics has no curve
                axes[0].plot(xs, ys, color=colors[name], alpha=0.25, lw=0.8)
                curves.append((xs, ys))
        if curves:
            n = min(len(c[0]) for c in curves)
            mean_x = [statistics.mean(c[0][i] for c in curves) for i in range(n)]
            mean_y = [statistics.mean(c[1][i] for c in curves) for i in range(n)]
            axes[0].plot(mean_x, mean_y, color=colors[name], lw=2, label=f"{name} (mean of {len(curves)})")
        i = list(runs).index(name)
        axes[1].scatter([i] * len(after[name]), [a * 100 for a in after[name]], color=colors[name])
        axes[1].errorbar(
            i + 0.15,
            statistics.mean(after[name]) * 100,
            yerr=statistics.stdev(after[name]) * 100 if len(after[name]) > 1 else 0,
            fmt="s",
            color=colors[name],
            capsize=4,
        )
    axes[0].set_xlabel("generated tokens (thousands)")
    axes[0].set_title("rollout success per step (%)")
    axes[0].legend()
    axes[1].axhline(before * 100, color="grey", lw=0.8, ls="--", label="warm start")
    axes[1].set_xticks(range(len(runs)), list(runs))
    axes[1].set_title("held-out success after RL, sampled (%)")
    axes[1].legend()
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 2 seeds, 3 steps, 8 tasks")
    load_builtin_suites()
    ap.add_argument("--suite", choices=sorted(s.name for s in list_suites()), default="tool-maze")
    ap.add_argument("--train", default=None, help="training stream 'module:fn' (default: the preset's)")
    ap.add_argument("--train-options", default=None, help="its keyword arguments, JSON")
    ap.add_argument(
        "--heldout",
        default=None,
        help="held-out tasks 'module:fn', called as fn(--eval-size, **--heldout-options), in place "
        "of the suite's own: for a suite too small to measure on (textworld-coin has 8 games); "
        "none may be a task of the training stream",
    )
    ap.add_argument("--heldout-options", default=None, help="its keyword arguments, JSON")
    ap.add_argument("--demo", default=None, help="warm start's demonstrator 'module:fn' (task -> policy)")
    ap.add_argument("--env-id", default=None, help="the env to run the suite in (default: the suite's)")
    ap.add_argument("--max-turns", type=int, default=None, help="default: 5 (toy suites), else the suite's")
    ap.add_argument("--demo-max-turns", type=int, default=None)
    ap.add_argument("--max-new-tokens", type=int, default=48, help="per turn")
    ap.add_argument("--max-context-tokens", type=int, default=1024)
    ap.add_argument(
        "--context",
        choices=["truncate", "sliding_window"],
        default="truncate",
        help="past --max-context-tokens: end the episode, or drop the oldest turns (RL, the "
        "demonstrations and the held-out evaluations alike; tree modes need truncate)",
    )
    ap.add_argument(
        "--gigpo-options", default=None, help="JSON keyword options of the GiGPO modes' estimator"
    )
    ap.add_argument(
        "--tree-options",
        default=None,
        help='JSON keyword options of tree + tree\'s estimator (e.g. {"reweight": "sqrt"})',
    )
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument(
        "--only-seeds",
        default=None,
        help="run just these of the --seeds (comma-separated, e.g. 2,4,6), so that two processes "
        "share a benchmark's seeds; the others are left to the other process, and --report "
        "builds the whole table from the records",
    )
    ap.add_argument("--steps", type=int, default=60, help="GRPO's steps; the others match its tokens")
    ap.add_argument("--max-steps-factor", type=float, default=3.0, help="cap: this x --steps")
    ap.add_argument(
        "--model",
        choices=["small", "main"],
        default="small",
        help="the tiny model's size: the library default (2 layers, hidden 64) or the main job's "
        "(4 layers, hidden 128; several times slower a step)",
    )
    ap.add_argument(
        "--vlm",
        action="store_true",
        help="the tiny vision-language model (model.tiny_vlm: Qwen2-VL's architecture, --model its "
        "text half) in place of the text model, for suites that show pictures (sokoban-6x6-image, tool-cues-image)",
    )
    ap.add_argument(
        "--tokenizer-text",
        default=None,
        help="'module:fn' giving the suite's language for the tiny model's tokenizer (model.tiny."
        "domain_text; default: tool-mini's), e.g. arborl.tasks.sokoban.suite:tokenizer_text",
    )
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--sft-batch", type=int, default=32)
    ap.add_argument("--sft-lr", type=float, default=1e-3)
    ap.add_argument(
        "--sft-micro-batch",
        type=int,
        default=None,
        help="demonstrations per SFT forward (sft.micro_batch_size; default the whole --sft-batch): "
        "lower it where long demonstrations with pictures do not fit in memory",
    )
    ap.add_argument(
        "--sft-env-weight",
        type=float,
        default=1.0,
        help="weight of the tokens the demonstrator did not write (observations) in the warm "
        "start's loss, per reply token (sft.env_weight; 0 where observations dwarf the replies)",
    )
    ap.add_argument("--init", default=None, help="a model dir to start from (skips the warm start)")
    ap.add_argument(
        "--warm-only",
        action="store_true",
        help="only the warm start and its sampled held-out success (reuse it with --init)",
    )
    ap.add_argument(
        "--checkpoint-every", type=int, default=5, help="RL steps between a run's checkpoints (for --resume)"
    )
    ap.add_argument(
        "--modes",
        default=None,
        help=f"of {','.join(MODES)}; default: all but oracle, all on suites whose env labels its steps",
    )
    ap.add_argument("--lr", type=float, default=1e-4, help="short runs: above the main job's 3e-5")
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument(
        "--kl-coef",
        type=float,
        default=0.0,
        help="KL to the warm start in the loss, this weight (learner.use_kl_loss, kl_loss_coef; 0: off)",
    )
    ap.add_argument(
        "--kl-type",
        default="low_var_kl",
        help="verl's KL estimator (learner.kl_loss_type): kl, mse, low_var_kl, ...",
    )
    ap.add_argument(
        "--entropy-coeff", type=float, default=0.0, help="entropy bonus weight (learner.entropy_coeff)"
    )
    ap.add_argument(
        "--warmup-steps",
        type=int,
        default=0,
        help="RL's learning rate rises linearly over this many optimizer steps (learner.warmup_steps; "
        "0: the full rate from the first update)",
    )
    ap.add_argument("--samples", type=int, default=4, help="held-out samples per task")
    ap.add_argument("--eval-size", type=int, default=64)
    ap.add_argument("--out", type=Path, default=Path("runs/bench-learning"))
    ap.add_argument("--tag", default="", help="in the output files' names: learning-TAG.md, ...")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="go on with an interrupted benchmark in --out (same arguments, with --init): runs "
        "that finished their held-out evaluation are kept, a run cut short goes on from its last "
        "checkpoint (--checkpoint-every), the rest run from the start",
    )
    ap.add_argument(
        "--report", action="store_true", help="only rebuild the table and the figure from the runs in --out"
    )
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.steps, args.sft_steps, args.eval_size, args.samples = 2, 3, 20, 8, 2
    suite_settings(args)
    labelled = SUITES.get(args.suite, {}).get("labels", False)
    modes = [
        m for m in (args.modes or ",".join(m for m in MODES if m != "oracle" or labelled)).split(",") if m
    ]
    if "oracle" in modes and not labelled:
        raise SystemExit(
            f"--modes oracle needs a suite whose env labels each step right or wrong (tool-cues, "
            f"tool-cues-single); {args.suite} does not"
        )
    if modes[0] != "grpo":
        raise SystemExit("--modes must start with grpo: the others match its generated tokens")
    trees = [m for m in modes if "tree" in MODES[m].get("rollout", {})]
    if trees and args.context != "truncate" and not (args.warm_only or args.report):
        raise SystemExit(
            f"--context {args.context} with the tree modes {trees}: a tree's leaves share their "
            "prefix turns, which a new context would split; run them with --context truncate "
            "(and a --max-context-tokens that holds a whole episode) or leave them out of --modes"
        )
    if args.report:
        report(args, modes)
        return
    if args.resume and not args.init:
        raise SystemExit("--resume goes on from a warm start: name it with --init")
    if not args.init:
        shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    records = records_dir(args.tag)
    if not args.resume and not args.warm_only:
        shutil.rmtree(records, ignore_errors=True)  # a new benchmark: its runs start over
    t_start = time.time()
    model = args.init or warm_start(args)
    digest = model_digest(model)
    start_summary = args.out / "eval-start" / "summary.json"
    recorded = check_start(args.tag, digest, None) if args.resume else None
    if recorded is not None:
        before = recorded
    elif args.resume and start_summary.exists():
        before = float(json.loads(start_summary.read_text())["resolved_rate"])
    else:
        before = sampled_success(model, args, args.out / "eval-start")
    if args.resume and recorded is None:  # records without a digest: the same held-out success
        recorded = check_start(args.tag, digest, before)
    print(f"warm start: sampled held-out success {before:.1%} ({time.time() - t_start:.0f} s)", flush=True)
    if args.warm_only:
        print(f"warm start: {model} (digest {digest})")
        return
    start_file = records / "start.json"
    start = (
        json.loads(start_file.read_text())
        if recorded is not None
        else {"command": command_line(), "task_streams": PER_SEED}
    )
    # a benchmark recorded before seeds had their own streams goes on with the one stream
    args.task_streams = start.get("task_streams", "shared")
    records.mkdir(parents=True, exist_ok=True)
    start_file.write_text(json.dumps({**start, "before": before, "digest": digest}, indent=1) + "\n")
    runs: dict[str, list[list[dict[str, Any]]]] = {m: [] for m in modes}
    after: dict[str, list[float]] = {m: [] for m in modes}
    stats: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    only = None if args.only_seeds is None else {int(s) for s in args.only_seeds.split(",")}
    if only is not None and not only <= set(range(args.seeds)):
        raise SystemExit(
            f"--only-seeds {args.only_seeds}: each must be one of the {args.seeds} seeds 0..{args.seeds - 1}"
        )
    for seed in range(args.seeds):
        if only is not None and seed not in only:
            continue
        budget: float | None = None
        for name in modes:  # interleaved: a drift of the machine hits every mode alike
            run_dir = args.out / f"{slug(name)}-{seed}"
            record = records / f"{slug(name)}-{seed}.json"
            done_summary = run_dir / "eval-end" / "summary.json"
            if args.resume and not record.exists() and done_summary.exists():
                save_record(record, run_dir, float(json.loads(done_summary.read_text())["resolved_rate"]))
            if args.resume and record.exists():  # finished by an earlier, interrupted run
                a, metrics, s = load_record(record)
                budget = s["tokens"] if name == "grpo" else budget
                runs[name].append(metrics)
                after[name].append(a)
                stats[name].append(s)
                print(f"{name} seed {seed}: done before, held-out {a:.1%}", flush=True)
                continue
            if not (args.resume and list((run_dir / "checkpoints").glob("step-*"))):
                shutil.rmtree(run_dir, ignore_errors=True)  # else the trainer resumes its checkpoint
            cfg = run_config(args, run_dir, model, name, seed)
            asyncio.run(TokenBudgetTrainer(cfg, budget).run())
            s = run_stats(read_metrics(run_dir))
            if name == "grpo":
                budget = s["tokens"]
            model_dir = sorted((run_dir / "checkpoints").glob("step-*"))[-1] / "model"
            a = sampled_success(str(model_dir), args, run_dir / "eval-end")
            save_record(record, run_dir, a)
            runs[name].append(load_record(record)[1])
            after[name].append(a)
            stats[name].append(s)
            print(
                f"{name} seed {seed}: {s['steps']:.0f} steps ({s['updates']:.0f} optimizer steps), "
                f"{s['tokens']:.0f} tokens{', stopped by the entropy guard' if s['stopped'] else ''}, "
                f"held-out {before:.1%} -> {a:.1%}",
                flush=True,
            )
        # after every round, so a run cut short still leaves its table
        done = [m for m in modes if after[m]]
        plot({m: runs[m] for m in done}, after, before, outputs(args.tag)[1])
        write_table(args, done, before, after, stats, time.time() - t_start)


def command_line() -> str:
    return shlex.join(["python", "bench/bench_learning.py", *sys.argv[1:]])


def report(args: argparse.Namespace, modes: list[str]) -> None:
    """The table and the figure again, from the runs' records (`bench/results/learning-TAG-runs`):
    the seeds every mode completed."""
    records = records_dir(args.tag)
    if not (records / "start.json").exists():
        raise SystemExit(f"{records} holds no benchmark (no start.json)")
    seeds = 0
    while all((records / f"{slug(m)}-{seeds}.json").exists() for m in modes):
        seeds += 1
    if not seeds:
        raise SystemExit(f"{records}: no seed was completed by every mode of {modes}")
    paths = {m: [records / f"{slug(m)}-{i}.json" for i in range(seeds)] for m in modes}
    start = json.loads((records / "start.json").read_text())
    loaded = {m: [load_record(r) for r in paths[m]] for m in modes}
    after = {m: [rec[0] for rec in loaded[m]] for m in modes}
    stats = {m: [rec[2] for rec in loaded[m]] for m in modes}
    args.seeds = seeds
    args.task_streams = start.get("task_streams", "shared")
    plot(
        {m: [rec[1] for rec in loaded[m]] for m in modes},
        after,
        start["before"],
        outputs(args.tag)[1],
    )
    write_table(args, modes, start["before"], after, stats, None, start["command"])


def pct(x: float) -> str:
    """A share as a whole percentage; "—" for a record older than the number (NaN)."""
    return "—" if math.isnan(x) else f"{x:.0%}"


def write_table(
    args: argparse.Namespace,
    modes: list[str],
    before: float,
    after: dict[str, list[float]],
    stats: dict[str, list[dict[str, float]]],
    seconds: float | None,
    command: str | None = None,
) -> None:
    rows = []
    for name in modes:
        s = stats[name]
        # NaN where a record is older than the number (a record kept without its metrics)
        avg = lambda k, s=s: statistics.mean(x.get(k, math.nan) for x in s)  # noqa: E731
        updates = "—" if math.isnan(avg("updates")) else f"{avg('updates'):.0f}"
        # † a run the entropy guard stopped
        per_seed = " / ".join(
            f"{a:.0%}{'†' if x.get('stopped') else ''}" for a, x in zip(after[name], s, strict=True)
        )
        diffs = [a - g for a, g in zip(after[name], after["grpo"], strict=True)]
        mean, half = interval(diffs)
        vs = "—" if name == "grpo" else f"{mean:+.1%} ({mean - half:+.1%} to {mean + half:+.1%})"
        fast = [x["to90"] / 1000 for x in s]
        if any(math.isnan(f) for f in fast):
            to90 = " / ".join("never" if math.isnan(f) else f"{f:.1f}k" for f in fast)
        elif name == "grpo" or any(math.isnan(g["to90"]) for g in stats["grpo"]):
            to90 = f"{statistics.mean(fast):.1f}k"
        else:
            m90, h90 = interval([f - g["to90"] / 1000 for f, g in zip(fast, stats["grpo"], strict=True)])
            to90 = f"{statistics.mean(fast):.1f}k ({m90:+.1f}k, {m90 - h90:+.1f}k to {m90 + h90:+.1f}k)"
        firsts = [v for x in s if not math.isnan(v := x.get("entropy_first", math.nan))]
        lasts = [v for x in s if not math.isnan(v := x.get("entropy_last", math.nan))]
        entropy = (  # the mean over the seeds that logged it, and the highest: one exploding run shows
            f"{statistics.mean(firsts):.2f} → {statistics.mean(lasts):.2f} (highest {max(lasts):.2f})"
            if lasts
            else "—"
        )
        rows.append(
            f"| {name} | {len(s)} | {before:.1%} → **{statistics.mean(after[name]):.1%}** "
            f"| {per_seed} | {vs} | {avg('steps'):.0f} | {updates} "
            f"| {avg('tokens') / 1000:.1f}k | {avg('tokens_per_traj'):.0f} | {avg('uniform'):.0%} "
            f"| {avg('clip'):.3f} | {pct(avg('anchor_shared'))} ({pct(avg('anchor_recurring'))}) "
            f"| {avg('anchor_size'):.2f} | {pct(avg('step_nonzero'))} "
            f"| {avg('seconds'):.0f} | {avg('reward_first'):.2f} → {avg('reward_last'):.2f} | {entropy} | {to90} |"
        )
    table, figure = outputs(args.tag)
    when = "the table rebuilt from the runs" if seconds is None else f"{seconds / 60:.0f} min in all"
    ran = command or command_line()
    text = f"""# Learning benchmark: GRPO vs GiGPO vs tree rollouts at equal generated tokens

`{ran}` on {platform.node()} \
({os.cpu_count()} cores), {time.strftime("%Y-%m-%d %H:%M")}, {when}. \
Suite `{args.suite}`, training tasks `{args.train}` {json.dumps(args.train_options)}, at most \
{args.max_turns} turns of {args.max_new_tokens} tokens, context {args.context} \
{args.max_context_tokens} tokens; one warm start \
({args.init or f"{args.sft_steps} SFT steps (lr {args.sft_lr:g}, env weight {args.sft_env_weight:g}) on demonstrations by `{args.demo or 'the suite gold policy'}`"}); \
GiGPO options {json.dumps(args.gigpo_options)}; \
{f"tree options {json.dumps(args.tree_options)}; " if args.tree_options else ""}sync RL, 4 groups x 8 a step, lr {args.lr:g}, temperature {args.temperature}, 2 mini-batches a \
batch; GRPO runs {args.steps} steps and every other mode stops at GRPO's generated tokens of \
the same seed (at most {args.max_steps_factor:g}x the steps); optimizer steps are PPO \
mini-batch updates, summed over the run. {stability_text(args)}Training tasks: \
{"each seed its own stream (tasks.seed = the seed), every mode of a seed the same" if args.task_streams == PER_SEED else "one stream (tasks.seed 0) for every seed and mode"}; \
rollouts seeded by the run seed. Held-out success sampled: \
{args.eval_size} tasks x {args.samples} samples. {args.seeds} seed{"s" if args.seeds != 1 else ""}, interleaved. \
† a run the entropy guard stopped (`run.entropy_guard`; its held-out success is its policy's there).

| mode | seeds | held-out, before → after (mean) | per seed | − GRPO, paired (95 % interval) | RL steps | optimizer steps | generated tokens | tokens / trajectory | uniform groups | clip fraction | turns in a shared anchor group (recurring across episodes) | anchor group size | turns with a GiGPO step signal | RL seconds | rollout reward, first → last 5 steps | token entropy (nats), first → last 5 steps | tokens until rollouts succeed 90 % (− GRPO, 95 %) |
|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|
{chr(10).join(rows)}

![curves](../../docs/{figure.name})
"""
    RESULTS.mkdir(exist_ok=True)
    table.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
