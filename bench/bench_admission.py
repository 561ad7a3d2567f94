"""Admission vs dropping vs sync (issue 53 §4): what stale work costs, and who it leaves out.

The workload is bench_trainer's: the tool env of the training suite with a long-tailed tool
latency on every step (lognormal, median `--latency` s, sigma 1, cap 8 s) times a factor of
the task's own (lognormal, sigma `--task-sigma`, fixed per task id), so some tasks are slow on
every call, as a big repository's tests or a slow site are, and a group (one task) is slow as
a whole: the case where taking the first groups to finish leaves tasks out of training. Three modes train the same
number of steps (the same trained samples) from one warm start, for each of `--seeds` seeds
(the run's seed: its task stream and its sampling), interleaved so that a drift of the machine
hits every mode alike:

- sync              one batch per version, all sampled with the current weights (staleness 0)
- async admission   runs ahead by up to `--staleness` versions; the learner takes groups in
                    dispatch order (`async.order=dispatch`), waiting for the oldest still
                    running, so nothing arrives staler than the bound; late work would be
                    down-weighted (`async.stale=downweight`)
- async dropping    the same run-ahead, the first groups to finish taken first
                    (`async.order=arrival`) and what is staler than the bound dropped
                    (`async.stale=drop`; dropped groups are replaced): arborl before issue 53

Per run: RL seconds (first rollout to last update) and trained samples/s against sync of the
same seed; the slow episodes' share of training against their share of sampling (slow: the
quarter of the run's consumed episodes with the longest wall time, tool latency included;
consumed: trained or dropped); groups and tokens dropped or down-weighted; greedy held-out
success before and after. Paired across seeds: admission − dropping, with a 95 % t interval.

    python bench/bench_admission.py [--quick] [--seeds 3] [--steps 40] [--init MODEL_OR_RUN]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench_trainer import (
    LATENCY,
    add_run_args,
    base_config,
    reward_trend,
    rl_seconds,
    slow_tool_env,
    slug,
    t975,
    warm_model,
)

from arborl.agents.trajectory import episodes_of
from arborl.envs import register_env
from arborl.trainer.local.checkpoint import Checkpointer
from arborl.trainer.local.metrics_log import read_metrics
from arborl.trainer.local.trainer import Trainer
from arborl.trainer.local.trajectory_store import TrajectoryStore

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def modes(staleness: int, in_flight: int) -> dict[str, dict[str, Any]]:
    ahead = {"mode": "async", "max_staleness": staleness, "max_groups_in_flight": in_flight}
    return {
        "sync": {"mode": "sync", "partial_rollouts": False},
        "async admission": {**ahead, "order": "dispatch", "stale": "downweight"},
        "async dropping": {**ahead, "order": "arrival", "stale": "drop"},
    }


def episode_seconds(trajs: list[Any]) -> list[float]:
    """Wall time of each episode of a group (generation and env time, the injected tool latency
    included), from its last segment's metrics."""
    return [
        trajs[e[-1]].metrics.get("gen_s", 0.0) + trajs[e[-1]].metrics.get("env_s", 0.0)
        for e in episodes_of(trajs)
    ]


def slow_shares(run_dir: Path) -> dict[str, float]:
    """The slow quarter of the consumed episodes: its share of what was trained and of what
    was consumed (trained or dropped), by episodes and by sampled tokens."""
    ckpt = Checkpointer(run_dir)
    latest = ckpt.latest()
    assert latest is not None, f"{run_dir}: no checkpoint"
    _, state = ckpt.load(latest)
    store = TrajectoryStore(run_dir / "trajectories")
    trained = set(state.trained)
    rows: list[tuple[float, int, bool]] = []  # (seconds, tokens, trained) per consumed episode
    for index in [*state.trained, *state.dropped]:
        trajs = store.get(index)
        for secs, ep in zip(episode_seconds(trajs), episodes_of(trajs), strict=True):
            tokens = sum(trajs[i].num_response_tokens for i in ep)
            rows.append((secs, tokens, index in trained))
    cut = sorted(s for s, _, _ in rows)[int(0.75 * len(rows))]
    slow = [r for r in rows if r[0] >= cut]
    trained_rows = [r for r in rows if r[2]]
    return {
        "slow_consumed": len(slow) / len(rows),
        "slow_trained": sum(r[2] for r in slow) / max(1, len(trained_rows)),
        "slow_token_consumed": sum(r[1] for r in slow) / max(1, sum(r[1] for r in rows)),
        "slow_token_trained": sum(r[1] for r in slow if r[2]) / max(1, sum(r[1] for r in trained_rows)),
        "generated_tokens": float(sum(r[1] for r in rows)),
    }


def run_stats(run_dir: Path, summary: dict[str, Any], samples: int) -> dict[str, Any]:
    rl = [e for e in read_metrics(run_dir) if e["phase"] == "rl" and not e.get("rolled_back")]
    secs = rl_seconds(run_dir)

    def total(key: str) -> float:
        return float(sum(e.get(key, 0.0) for e in rl))

    return {
        "rl_s": secs,
        "samples_per_s": samples / secs,
        "before": summary["initial_success"],
        "after": summary["final_success"],
        "reward_trend": reward_trend(run_dir),
        "dropped_groups": total("staleness/dropped_groups"),
        "dropped_tokens": total("staleness/dropped_tokens"),
        "downweighted_groups": total("staleness/downweighted_groups"),
        "staleness_mean": statistics.mean(e["staleness/mean"] for e in rl),
        "staleness_max": max(e["staleness/max"] for e in rl),
        **slow_shares(run_dir),
    }


def paired(a: list[float], b: list[float]) -> str:
    """mean(b - a) with its 95 % t interval (paired by seed), in points."""
    d = [100 * (y - x) for x, y in zip(a, b, strict=True)]
    if len(d) < 2:
        return f"{d[0]:+.1f} (one seed)"
    half = t975(len(d) - 1) * statistics.stdev(d) / len(d) ** 0.5
    m = statistics.mean(d)
    return f"{m:+.1f} ({m - half:+.1f} to {m + half:+.1f})"


def report(args: argparse.Namespace, names: list[str], results: dict[str, list[dict[str, Any]]]) -> str:
    def mean(name: str, key: str) -> float:
        return statistics.mean(r[key] for r in results[name])

    base = results["sync"]
    rows = []
    for name in names:
        rs = results[name]
        speed = statistics.mean(
            r["samples_per_s"] / b["samples_per_s"] for r, b in zip(rs, base, strict=True)
        )
        rows.append(
            f"| {name} | {mean(name, 'rl_s'):.0f} | **{speed:.2f}×** | {mean(name, 'staleness_mean'):.2f} "
            f"/ {max(r['staleness_max'] for r in rs):.0f} | {mean(name, 'dropped_groups'):.1f} "
            f"({mean(name, 'dropped_tokens'):.0f} tok) | {mean(name, 'downweighted_groups'):.1f} "
            f"| {mean(name, 'slow_trained'):.1%} of {mean(name, 'slow_consumed'):.1%} "
            f"| {mean(name, 'slow_token_trained'):.1%} of {mean(name, 'slow_token_consumed'):.1%} "
            f"| {mean(name, 'generated_tokens'):.0f} | {mean(name, 'before'):.1%} → {mean(name, 'after'):.1%} |"
        )
    per_seed = "\n".join(
        f"| {seed} | " + " | ".join(f"{results[n][i]['after']:.1%}" for n in names) + " |"
        for i, seed in enumerate(args.seed_list)
    )
    after = {n: [r["after"] for r in results[n]] for n in names}
    slow = {n: [r["slow_trained"] - r["slow_consumed"] for r in results[n]] for n in names}
    return f"""# Admission vs dropping vs sync (issue 53 §4)

`{shlex.join(["python", "bench/bench_admission.py", *sys.argv[1:]])}` on {platform.node()} \
({os.cpu_count()} cores), {time.strftime("%Y-%m-%d %H:%M")}. The main job's tiny model from \
{args.init_note}, {args.steps} RL steps × 4 groups × 8 episodes per run (the same trained samples in \
every mode), lognormal tool latency per step (median {args.latency} s, σ = 1, cap 8 s) times a lognormal \
factor per task (σ = {args.task_sigma}), async modes \
{args.staleness} versions ahead with {args.in_flight} groups in flight; seeds {", ".join(map(str, args.seed_list))} \
(each its own task stream and sampling). Means over seeds; speed is trained samples/s against sync \
of the same seed. Slow episodes: the quarter of a run's consumed (trained or dropped) episodes with \
the longest wall time.

| mode | RL s | vs sync | staleness mean / max | dropped groups | down-weighted groups | slow episodes: share of training, of sampling | slow episodes' tokens: share of training, of sampling | tokens generated | held-out success (greedy, {args.eval_size} tasks) |
|---|---:|---:|---:|---:|---:|---|---|---:|---|
{chr(10).join(rows)}

Held-out success after RL, per seed:

| seed | {" | ".join(names)} |
|---|{"---:|" * len(names)}
{per_seed}

Paired by seed (points, 95 % t interval): held-out success, admission − dropping \
{paired(after["async dropping"], after["async admission"])}; admission − sync \
{paired(after["sync"], after["async admission"])}. Slow episodes' share of training minus their share \
of sampling: admission {statistics.mean(slow["async admission"]):+.1%}, dropping \
{statistics.mean(slow["async dropping"]):+.1%}, sync {statistics.mean(slow["sync"]):+.1%}.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--latency", type=float, default=0.3, help="median tool latency (s)")
    ap.add_argument(
        "--task-sigma",
        type=float,
        default=1.0,
        help="per-task latency multiplier's lognormal sigma (0: none)",
    )
    ap.add_argument("--staleness", type=int, default=2)
    ap.add_argument("--in-flight", type=int, default=12, help="async: groups generating at once")
    add_run_args(ap, "runs/bench-admission")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.seeds, args.sft_steps, args.eval_size = 4, 2, 20, 8
    args.seed_list = list(range(args.seeds))
    LATENCY["median"], LATENCY["task_sigma"] = args.latency, args.task_sigma
    register_env("bench/SlowTool-v0", slow_tool_env, force=True)
    if not args.resume:
        shutil.rmtree(args.out, ignore_errors=True)

    if args.init:
        model = args.init
        args.init_note = args.init_note or args.init
    else:  # the main job's warm start cut short, as bench_trainer's (about half the tasks right)
        model = warm_model(args)
        args.init_note = f"a warm start of {args.sft_steps} SFT steps (the main job's recipe, cut short)"

    table = modes(args.staleness, args.in_flight)
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in table}
    for seed in args.seed_list:
        for name, mode in table.items():
            run_dir = args.out / f"{slug(name)}-{seed}"
            done = run_dir / "stats.json"
            if args.resume and done.exists():
                results[name].append(json.loads(done.read_text()))
                continue
            shutil.rmtree(run_dir, ignore_errors=True)
            cfg = base_config(
                run_dir,
                args,
                model={"path": model},
                rollout={"env_id": "bench/SlowTool-v0"},
                tasks={"seed": seed},
                run={"seed": seed},
                **{"async": mode},
            )
            summary = asyncio.run(Trainer(cfg).run())
            samples = args.steps * cfg.rollout.groups_per_step * cfg.rollout.group_size
            stats = run_stats(run_dir, summary, samples)
            done.write_text(json.dumps(stats, indent=1))
            results[name].append(stats)
            print(
                f"{name} seed {seed}: RL {stats['rl_s']:.0f} s, held-out {stats['after']:.1%}, "
                f"dropped {stats['dropped_groups']:.0f}, slow share {stats['slow_trained']:.1%} "
                f"of {stats['slow_consumed']:.1%}",
                flush=True,
            )
    text = report(args, list(table), results)
    (RESULTS / ("admission-quick.md" if args.quick else "admission.md")).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
