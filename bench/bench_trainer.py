"""Asynchronous vs synchronous RL, and partial rollouts, on one workload.

The workload: the tool env of the training suite with a long-tailed tool latency injected
into every step (lognormal: median `--latency` s, sigma 1, capped at 8 s, as real tools and
sandboxes behave), the tiny model warm-started once by the main job's recipe cut short
(`--sft-steps`, shared by all runs: about half the held-out tasks right, so RL has room),
then the same number of RL samples in each mode:

- sync            one batch per policy version, all sampled with the current weights
                  (staleness 0; waits for the slowest episode of every batch)
- sync+partial    APRIL: 1.5 batches in flight; unfinished episodes pause during the
                  update and resume with the new weights
- async           generation runs ahead of the learner by up to `--staleness` versions
                  (12 groups in flight)
- async (S, G)    the same with staleness S and G groups in flight (`--wide S,G`): more
                  rows in the engine's running batch and more tool latency hidden, staler
                  samples

Throughput part: end-to-end samples/s of the RL phase as ratios against sync measured in
this run, with the rollout-reward curves (10-step running means) and held-out success
before and after (trainer.md, trainer.png). RL samples at temperature 0.6 with lr 3e-5: at
temperature 1 the half-trained model's samples mostly fail, and at lr 1e-4 one update
(fresh Adam) lowers the log-prob of a group's successes along with its failures
(docs/results/async-vs-sync.md).

Learning part: 60 steps move nothing measurable, so sync and the wide async mode train
`--learning-steps` (300) steps each from the same start without injected latency,
`--repeats` (5) times each, interleaved, and the held-out success is measured before and
after every run, sampled at the rollout temperature (64 tasks x 8 samples x 3 seeds: what
RL optimises) as well as greedy. Two runs of one mode differ by several points (rollout
batches depend on timing), so the question whether stale samples cost learning is answered
by the difference of the modes' mean changes with a 95 % interval (trainer-learning.md,
trainer-learning.png).

    python bench/bench_trainer.py [--quick] [--part all|throughput|learning] [--steps 60] [--latency 0.3]
                                  [--repeats 5] [--init RUN_DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import os
import platform
import random
import re
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium

from arborl.envs import register_env
from arborl.trainer.local.config import TrainConfig
from arborl.trainer.local.metrics_log import read_metrics
from arborl.trainer.local.report import _series, plot_runs, running_mean
from arborl.trainer.local.trainer import Trainer

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
LATENCY = {"median": 0.3, "task_sigma": 0.0}


def task_factor(task_id: str) -> float:
    """A task's own latency multiplier, lognormal with `task_sigma` (fixed per task id): some
    tasks are slow on every call, as a big repository's tests or a slow site are. 0: none."""
    sigma = LATENCY["task_sigma"]
    if not sigma:
        return 1.0
    z = random.Random(hashlib.sha256(task_id.encode()).digest()).gauss(0.0, 1.0)
    return math.exp(sigma * z)


class SlowTools(gymnasium.Wrapper):
    """The wrapped env's steps take a long-tailed extra latency (an await, not CPU)."""

    def __init__(self, env: gymnasium.Env, seed: int = 0) -> None:
        super().__init__(env)
        self.rng = random.Random(seed + id(self))

    async def areset(self, **kwargs: Any):
        out = await self.env.unwrapped.areset(**kwargs)
        self.task_factor = task_factor(self.env.unwrapped.task_id)
        return out

    async def astep(self, action: str):
        step = self.rng.lognormvariate(0.0, 1.0) * LATENCY["median"]
        delay = min(8.0, step * getattr(self, "task_factor", 1.0))
        await asyncio.sleep(delay)
        return await self.env.unwrapped.astep(action)

    async def afinish(self):
        return await self.env.unwrapped.afinish()

    async def arelease(self):
        release = getattr(self.env.unwrapped, "arelease", None)
        if release is not None:
            await release()

    async def aclose(self):
        await self.env.unwrapped.aclose()


def slow_tool_env(**kwargs: Any) -> gymnasium.Env:
    return SlowTools(gymnasium.make("arborl/Tool-v0", **kwargs))


def main_job_model() -> dict[str, Any]:
    """The main job's tiny-model sizes (`model.tiny` of `TrainConfig.main_job()`)."""
    return TrainConfig.main_job().model.tiny.model_dump()


def base_config(run_dir: Path, args: argparse.Namespace, **over: Any) -> TrainConfig:
    cfg: dict[str, Any] = {
        "model": {"tiny": main_job_model()},
        "tasks": {"train": args.tasks, "eval_suite": args.suite, "eval_size": args.eval_size},
        "rollout": {
            "group_size": 8,
            "groups_per_step": 4,
            "max_turns": 4,
            "max_new_tokens": 64,
            "temperature": args.temperature,
        },
        "learner": {"lr": args.lr, "micro_batch_size": 16},
        "sft": {"steps": 0},
        "run": {
            "dir": str(run_dir),
            "steps": args.steps,
            # Held-out evaluations only before and after: rollouts keep going during one (and
            # slow it down in proportion to what is in flight), so evaluations inside the timed
            # phase would blur the comparison.
            "eval_every": args.steps,
            "checkpoint_every": 10_000,
            "time_budget_min": None,
        },
    }
    for key, value in over.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    return TrainConfig.model_validate(cfg)


def add_run_args(ap: argparse.ArgumentParser, out: str) -> None:
    """The arguments every bench on bench_trainer's runs takes: the warm start (built, or
    `--init`), the recipe's lr and temperature, the training stream and held-out suite, the
    output directory and resuming."""
    ap.add_argument("--sft-steps", type=int, default=500)
    ap.add_argument(
        "--init", default=None, help="start every run from this model, checkpoint or run directory"
    )
    ap.add_argument("--init-note", default=None, help="how the report describes --init (default: its path)")
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument("--tasks", default="arborl.tasks.toy.tool_mini:generate_tool_tasks")
    ap.add_argument("--suite", default="tool-mini")
    ap.add_argument("--eval-size", type=int, default=64)
    ap.add_argument("--out", type=Path, default=Path(out))
    ap.add_argument("--resume", action="store_true", help="keep the runs already done (their stats.json)")


def warm_model(args: argparse.Namespace) -> str:
    """The main job's warm start (TrainConfig.main_job()), shorter: `args.sft_steps` steps on
    counterfactual look-ups and two-step questions, 20000 demonstrations (200 with
    `args.quick`), tool results predicted too; built in `args.out`/warm unless one is there.
    Returns its model directory."""
    warm = args.out / "warm"
    if not list((warm / "checkpoints").glob("step-*")):
        recipe = {"steps": args.sft_steps, "demos": 200 if args.quick else 20000, "env_weight": 1.0}
        counterfactual = {"train": "arborl.tasks.toy.tool_mini:generate_counterfactual_tasks"}
        asyncio.run(
            Trainer(base_config(warm, args, sft=recipe, tasks=counterfactual, run={"steps": 0})).run()
        )
    return str(sorted((warm / "checkpoints").glob("step-*"))[-1] / "model")


def rl_seconds(run_dir: Path) -> float:
    """Wall-clock seconds of the RL phase: from the end of the step-0 evaluation (the rollouts
    start after it) to the last update, everything included (waiting, training, weight
    pushes). Rollouts that keep going during an evaluation would be samples drawn in
    uncounted time, hence no evaluations in between (`eval_every` = steps)."""
    events = [e for e in read_metrics(run_dir) if not e.get("rolled_back")]
    start = next(e["time"] for e in events if e["phase"] == "eval-rl" and e["step"] == 0)
    return max(e["time"] for e in events if e["phase"] == "rl") - start


def reward_trend(run_dir: Path, n: int = 10) -> str:
    """Mean rollout reward of the first and of the last `n` RL steps."""
    r = [e["rollout/reward"] for e in read_metrics(run_dir) if e["phase"] == "rl" and "rollout/reward" in e]
    return f"{sum(r[:n]) / len(r[:n]):.2f} → {sum(r[-n:]) / len(r[-n:]):.2f}" if r else "—"


def sampled_success(model: str, args: argparse.Namespace, out: Path) -> list[float]:
    """Held-out success of `model` sampling at the rollout temperature (what RL optimises;
    greedy success hides a sharper distribution): the first `--eval-size` tasks × 8 samples,
    once per seed, through `arborl eval`'s runner."""
    from arborl.eval.config import EvalConfig
    from arborl.eval.runner import run_eval

    rates = []
    for seed in range(args.seeds):
        cfg = EvalConfig.model_validate(
            {
                "suite": args.suite,
                "agent": "model",
                "samples": 8,
                "pass_k": [1],
                "limit": args.eval_size,
                "concurrency": 32,
                "model": {
                    "path": model,
                    "temperature": args.temperature,
                    "max_new_tokens": 64,
                    "max_context_tokens": 1024,
                    "seed": seed,
                },
                "run": {"dir": str(out / f"seed-{seed}"), "resume": False},
                "report": False,
            }
        )
        rates.append(asyncio.run(run_eval(cfg)).summary["resolved_rate"])
    return rates


def wide_mode(wide: str) -> tuple[str, dict[str, Any]]:
    """The async mode of `--wide STALENESS,GROUPS`: its row name and `async` config."""
    staleness, groups = (int(x) for x in wide.split(","))
    return f"async ({staleness}, {groups})", {
        "mode": "async",
        "max_staleness": staleness,
        "max_groups_in_flight": groups,
    }


def slug(name: str) -> str:
    """A mode's name as a directory name."""
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-")


# Two-sided 95 % quantiles of Student's t by degrees of freedom (standard table values): the
# interval for the difference of the two modes' mean changes (Welch). Hand-written because
# scipy is not a dependency of the project for one number.
T975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
}


def t975(df: float) -> float:
    """The table's quantile for the largest tabled degrees of freedom ≤ `df` (conservative)."""
    return T975[max([k for k in T975 if k <= max(df, 1)])] if df < 60 else 1.96


def welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """mean(b) - mean(a), its standard error, and the half-width of its 95 % Welch interval."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = (va + vb) ** 0.5
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else 1e9
    return statistics.mean(b) - statistics.mean(a), se, t975(df) * se


def plot_learning(runs: dict[str, list[Path]], changes: dict[str, list[float]], out_png: Path) -> Path:
    """Rollout reward (25-step running mean) and greedy held-out success over RL steps, each
    repeat thin and the mean of the repeats bold, modes overlaid; the sampled held-out change
    of every repeat per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for color, (name, dirs) in zip(("tab:blue", "tab:orange", "tab:green"), runs.items(), strict=False):
        for ax, phase, key, smooth, scale in (
            (axes[0], "rl", "rollout/reward", 25, 1),
            (axes[1], "eval-rl", "success", 1, 100),
        ):
            curves = []
            for d in dirs:
                xs, ys = _series(read_metrics(d), phase, key)
                curves.append((xs, [y * scale for y in running_mean(ys, smooth)]))
                ax.plot(xs, curves[-1][1], color=color, alpha=0.25, lw=0.8)
            n = min(len(xs) for xs, _ in curves)
            mean = [statistics.mean(ys[i] for _, ys in curves) for i in range(n)]
            ax.plot(curves[0][0][:n], mean, color=color, lw=2, label=f"{name} (mean of {len(dirs)})")
        xs = [list(runs).index(name)] * len(changes[name])
        axes[2].scatter(xs, [c * 100 for c in changes[name]], color=color, alpha=0.7)
        axes[2].errorbar(
            xs[0] + 0.15,
            statistics.mean(changes[name]) * 100,
            yerr=statistics.stdev(changes[name]) * 100 if len(changes[name]) > 1 else 0,
            fmt="s",
            color=color,
            capsize=4,
        )
    axes[0].set_title("rollout reward (mean of 25 steps)")
    axes[1].set_title("held-out success, greedy (%)")
    axes[2].set_title("held-out success sampled: change (points)")
    axes[2].set_xticks(range(len(runs)), list(runs))
    axes[2].set_xlim(-0.5, len(runs) - 0.5)
    axes[2].axhline(0, color="grey", lw=0.8)
    for ax in axes[:2]:
        ax.set_xlabel("RL step")
        ax.legend()
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png


def learning(args: argparse.Namespace, model: str) -> None:
    """Sync against the wide async mode for `--learning-steps` from the same start, without
    injected latency (learning, not waiting, is measured), `--repeats` times each: held-out
    success sampled before and after every run, and the difference of the two modes' mean
    changes with a 95 % interval (trainer-learning.md, trainer-learning.png). Every run draws
    the same task stream (`tasks.seed`); repeat i of both modes has run seed i (the torch and
    sampling RNGs). Runs differ by more than their seeds (the rollout batches depend on
    timing), so repeats are what measure the spread."""
    wide_name, wide = wide_mode(args.wide or "8,32")
    modes = {"sync": {"mode": "sync", "partial_rollouts": False}, wide_name: wide}
    out = args.out / "learning"
    before = sampled_success(model, args, out / "eval-start")
    base = statistics.mean(before)
    runs: dict[str, list[Path]] = {name: [] for name in modes}
    changes: dict[str, list[float]] = {name: [] for name in modes}
    rows = []
    for repeat in range(args.repeats):
        for name, mode in modes.items():  # interleaved: a drift of the machine hits both modes alike
            run_dir = out / f"{slug(name)}-{repeat}"
            cfg = base_config(
                run_dir,
                args,
                model={"path": model},
                run={"steps": args.learning_steps, "eval_every": 50, "seed": repeat},
                **{"async": mode},
            )
            summary = asyncio.run(Trainer(cfg).run())
            after = sampled_success(str(run_dir), args, run_dir / "eval-end")
            events = [e for e in read_metrics(run_dir) if e["phase"] == "rl"]
            stale = sum(e.get("staleness/mean", 0.0) for e in events) / max(1, len(events))
            runs[name].append(run_dir)
            changes[name].append(statistics.mean(after) - base)
            rows.append((name, repeat, summary, after, rl_seconds(run_dir), stale))
            print(
                f"{name} #{repeat}: sampled held-out {base:.1%} -> {statistics.mean(after):.1%}", flush=True
            )
    png = plot_learning(runs, changes, RESULTS / "trainer-learning.png")
    pct = lambda xs: " / ".join(f"{x:.1%}" for x in xs)  # noqa: E731
    table = "\n".join(
        f"| {name} | {repeat} | {secs:.0f} | {stale:.1f} | {s['initial_success']:.0%} → {s['final_success']:.0%} "
        f"| {pct(after)} | {statistics.mean(after) - base:+.1%} |"
        for name, repeat, s, after, secs, stale in rows
    )
    summary_rows = "\n".join(
        f"| {name} | {len(c)} | **{statistics.mean(c):+.1%}** | "
        f"{statistics.stdev(c) if len(c) > 1 else 0.0:.1%} | {min(c):+.1%} to {max(c):+.1%} |"
        for name, c in changes.items()
    )
    sync_name, async_name = list(modes)
    verdict = ""
    if args.repeats > 1:
        diff, se, half = welch(changes[sync_name], changes[async_name])
        verdict = (
            f"\n{async_name} − sync, mean change: **{diff:+.1%}** (standard error {se:.1%}; 95 % Welch "
            f"interval {diff - half:+.1%} to {diff + half:+.1%}).\n"
        )
    text = f"""# Trainer benchmark: does asynchrony hurt learning?

`{shlex.join(["python", "bench/bench_trainer.py", *sys.argv[1:]])}` (learning part) on \
{platform.node()} ({os.cpu_count()} cores), {time.strftime("%Y-%m-%d %H:%M")}. From the same start \
({args.init_note or args.init or f"the main job's warm start cut to {args.sft_steps} steps"}), \
{args.learning_steps} RL steps × 4 groups × 8 episodes per run on `{args.tasks}` (sampling \
temperature {args.temperature}, lr {args.lr:g}), no injected latency, {args.repeats} runs of each mode \
(interleaved; every run draws the same task stream, and repeat i of both modes has run seed i). Held-out success is measured greedy (the \
trainer's evaluation) and sampled at the rollout temperature: the first {args.eval_size} \
`{args.suite}` tasks × 8 samples, once per evaluation seed (seeds: {args.seeds}). Before RL, \
sampled: {pct(before)} (mean {base:.1%}).

| mode | runs | mean change, sampled held-out | standard deviation | range |
|---|---:|---:|---:|---|
{summary_rows}
{verdict}
| mode | repeat | RL seconds | mean staleness | held-out greedy (start → end) | held-out sampled, per seed, after | change of the mean |
|---|---:|---:|---:|---|---|---:|
{table}

![learning curves]({png.name})
"""
    (RESULTS / "trainer-learning.md").write_text(text)
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--latency", type=float, default=0.3, help="median tool latency (s)")
    ap.add_argument("--staleness", type=int, default=2)
    ap.add_argument(
        "--wide",
        default="8,32",
        help="STALENESS,GROUPS of a second async row with more in flight ('' to skip it)",
    )
    ap.add_argument("--sft-steps", type=int, default=500)
    ap.add_argument(
        "--init",
        default=None,
        help="start every mode from this model, checkpoint or run directory (no warm start)",
    )
    ap.add_argument("--init-note", default=None, help="how the report describes --init (default: its path)")
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--temperature", type=float, default=0.6, help="rollout sampling temperature")
    ap.add_argument("--tasks", default="arborl.tasks.toy.tool_mini:generate_tool_tasks")
    ap.add_argument("--suite", default="tool-mini")
    ap.add_argument("--eval-size", type=int, default=64)
    ap.add_argument("--out", type=Path, default=Path("runs/bench-trainer"))
    ap.add_argument(
        "--part",
        choices=["all", "throughput", "learning"],
        default="all",
        help="throughput: the four modes under tool latency (trainer.md); learning: sync vs the "
        "wide async mode for --learning-steps without injected latency (trainer-learning.md)",
    )
    ap.add_argument("--learning-steps", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=3, help="sampled held-out evaluations per model")
    ap.add_argument("--repeats", type=int, default=5, help="learning part: runs of each mode")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.sft_steps, args.eval_size, args.learning_steps, args.seeds, args.repeats = (
            6,
            20,
            8,
            4,
            1,
            2,
        )
    LATENCY["median"] = args.latency
    register_env("bench/SlowTool-v0", slow_tool_env, force=True)
    shutil.rmtree(args.out, ignore_errors=True)

    # One warm start shared by every mode, so all begin from the same policy.
    model = args.init or warm_model(args)
    if args.part in ("all", "learning"):
        learning(args, model)
    if args.part in ("all", "throughput"):
        throughput(args, model)


def throughput(args: argparse.Namespace, model: str) -> None:
    """The four modes on the slow-tool workload: samples/s against sync (trainer.md)."""
    modes = {
        "sync": {"mode": "sync", "partial_rollouts": False},
        "sync+partial": {"mode": "sync", "partial_rollouts": True, "overprovision": 1.5},
        "async": {"mode": "async", "max_staleness": args.staleness, "max_groups_in_flight": 12},
    }
    if args.wide:
        wide_name, wide = wide_mode(args.wide)
        modes[wide_name] = wide
    rows, dirs = [], []
    for name, mode in modes.items():
        run_dir = args.out / slug(name)
        cfg = base_config(
            run_dir, args, model={"path": model}, rollout={"env_id": "bench/SlowTool-v0"}, **{"async": mode}
        )
        start = time.time()
        summary = asyncio.run(Trainer(cfg).run())
        samples = args.steps * cfg.rollout.groups_per_step * cfg.rollout.group_size
        rows.append((name, samples, rl_seconds(run_dir), time.time() - start, summary))
        dirs.append(run_dir)
        print(
            f"{name}: {samples} samples, RL {rows[-1][2]:.0f} s, success {summary['final_success']}",
            flush=True,
        )

    png = plot_runs(dirs, RESULTS / "trainer.png", labels=list(modes), smooth=10)
    base = rows[0][1] / rows[0][2]
    table = "\n".join(
        f"| {name} | {samples} | {secs:.0f} | {samples / secs:.2f} | **{samples / secs / base:.2f}×** "
        f"| {reward_trend(d)} | {s['initial_success']:.0%} → {s['final_success']:.0%} |"
        for (name, samples, secs, _, s), d in zip(rows, dirs, strict=True)
    )
    text = f"""# Trainer benchmark: async vs sync, partial rollouts

`{shlex.join(["python", "bench/bench_trainer.py", *sys.argv[1:]])}` on {platform.node()} ({os.cpu_count()} cores), \
{time.strftime("%Y-%m-%d %H:%M")}. Tiny model (hidden 128, 4 layers) \
{f"starting from {args.init_note or args.init}" if args.init else f"warm-started once by the main job's recipe for {args.sft_steps} steps"}, then {args.steps} RL steps × 4 groups × 8 episodes in each mode on \
`{args.tasks}` (sampling temperature {args.temperature}, lr {args.lr:g}) with a lognormal tool latency \
per step (median {args.latency} s, σ = 1, cap 8 s). \
RL seconds are the wall clock of the RL phase, from the first rollout to the last update (held-out evaluations only before and after it).

| mode | samples | RL seconds | samples/s | vs sync | rollout reward, first → last 10 steps | held-out success (start → end) |
|---|---:|---:|---:|---:|---|---|
{table}

![learning curves]({png.name})
"""
    (RESULTS / "trainer.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
