"""Each off-policy correction at staleness bounds 1, 4 and 8 (issue 53 §4): does it hold?

Async runs of the main job's tiny model from one warm start (bench_trainer's, or `--init`) on
the training suite, with the rollouts let run ahead: many groups in flight and a learner made
the slower side if need be (`--ppo-epochs` passes over each batch; more than 1 favours the
clipped corrections, the bypass ones having no trust region), so staleness reaches the bound. For each bound and each correction of `learner.correction` (trainer/local/off_policy.py)
one run of `--steps` steps, all from the same seed (task stream and sampling), interleaved so
that a drift of the machine hits every correction alike. Per run, from metrics.jsonl: the
staleness reached (mean / max), the policy entropy (first and last steps' means, and its
maximum), the PPO clip fraction, the ESS of the correction's weights, the share of tokens it
zeroed, and greedy held-out success before and after. A correction "holds" at a bound when its
entropy peaks within 1.5x of the sync control's and its held-out success ends within 10 points
of the control's (the same recipe with no staleness).

    python bench/bench_corrections.py [--quick] [--steps 20] [--init MODEL_OR_RUN]
"""

from __future__ import annotations

import argparse
import asyncio
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

from bench_trainer import add_run_args, base_config, slug, warm_model

from arborl.trainer.local.metrics_log import read_metrics
from arborl.trainer.local.trainer import Trainer

RESULTS = Path(__file__).resolve().parent / "results"
CORRECTIONS = ("decoupled", "none", "tis", "seq_mis", "geo_mask", "m2po")
BOUNDS = (1, 4, 8)
#: what "holds" means in the table (the docstring's rule)
ENTROPY_GROWTH, SUCCESS_DROP = 1.5, 0.10


def cells(args: argparse.Namespace) -> list[tuple[int, str]]:
    """(bound, correction) of each run, in run order. The first is the control: sync
    (staleness 0) with the default correction, what the same steps and PPO epochs do to
    entropy and success with no staleness at all."""
    return [(0, "decoupled")] + [(b, n) for b in args.bounds for n in args.corrections]


def run_stats(run_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    rl = [e for e in read_metrics(run_dir) if e["phase"] == "rl" and not e.get("rolled_back")]
    entropy = [e["actor/entropy"] for e in rl if "actor/entropy" in e]  # a step with no update has none
    k = max(1, len(rl) // 4)

    def mean(key: str) -> float:
        values = [e[key] for e in rl if key in e]
        return statistics.mean(values) if values else float("nan")

    return {
        "steps": len(rl),
        "updates": len(entropy),
        "staleness_mean": mean("staleness/mean"),
        "staleness_max": max(e.get("staleness/max", 0) for e in rl),
        "entropy_first": statistics.mean(entropy[:k]),
        "entropy_last": statistics.mean(entropy[-k:]),
        "entropy_max": max(entropy),
        "clipfrac": mean("actor/pg_clipfrac"),
        "ess": mean("offpolicy/ess"),
        "zeroed": mean("offpolicy/zero_weight_fraction"),
        "before": summary["initial_success"],
        "after": summary["final_success"],
        "stopped": bool(summary.get("stopped")),
    }


def holds(s: dict[str, Any], control: dict[str, Any] | None) -> bool:
    """Against the sync control (the same recipe without staleness): entropy never above
    ENTROPY_GROWTH times the control's peak, held-out success not SUCCESS_DROP below the
    control's, and no stop by the entropy guard. (Against its own start, the low, noisy entropy
    of this policy, 0.05 nats, doubled within the control run itself.)"""
    if control is None:
        return False
    return (
        not s["stopped"]
        and s["entropy_max"] <= ENTROPY_GROWTH * control["entropy_max"]
        and s["after"] >= control["after"] - SUCCESS_DROP
    )


def clip(fraction: float) -> str:
    return "—" if math.isnan(fraction) else f"{fraction:.3f}"


def verdict_of(bound: int, s: dict[str, Any], control: dict[str, Any] | None) -> str:
    return "control" if bound == 0 else "yes" if holds(s, control) else "**no**"


def report(args: argparse.Namespace, results: dict[tuple[int, str], dict[str, Any]], elapsed: float) -> str:
    rows = []
    control = results.get((0, "decoupled"))
    for bound, name in cells(args):
        s = results.get((bound, name))
        if s is None:
            continue
        rows.append(
            f"| {bound or 'sync (control)'} | {name} | {s['staleness_mean']:.2f} / {s['staleness_max']:.0f} "
            f"| {s['entropy_first']:.3f} → {s['entropy_last']:.3f} (max {s['entropy_max']:.3f}) "
            f"| {clip(s['clipfrac'])} | {s['ess']:.3f} | {s['zeroed']:.1%} "
            f"| {s['before']:.1%} → {s['after']:.1%} | {verdict_of(bound, s, control)} |"
        )
    verdict = []
    for bound in args.bounds:
        ran = [n for n in args.corrections if (bound, n) in results]
        held = [n for n in ran if holds(results[(bound, n)], control)]
        verdict.append(
            f"staleness {bound}: {', '.join(held) or 'none'}" if ran else f"staleness {bound}: not run"
        )
    return f"""# Off-policy corrections at staleness 1, 4 and 8 (issue 53 §4)

`{shlex.join(["python", "bench/bench_corrections.py", *sys.argv[1:]])}` on {platform.node()} \
({os.cpu_count()} cores), {time.strftime("%Y-%m-%d %H:%M")} ({elapsed / 60:.0f} min in this process). The main \
job's tiny model from {args.init_note}; async, {args.in_flight} groups in flight, \
{args.ppo_epochs} PPO epoch(s) a batch, {args.steps} steps × 4 groups × 8 episodes a run, seed {args.seed} for every run \
(the same task stream and sampling). One run per cell: a single seed, so read a cell as \
"did it blow up", not as a difference in success. The first row is the control: the same \
steps and PPO epochs in sync mode (staleness 0), what the recipe itself does to entropy and \
success. Clip fraction —: the bypass corrections (tis to m2po) have no PPO clip. Holds: entropy never above {ENTROPY_GROWTH}× the control's peak, held-out success not \
{SUCCESS_DROP * 100:.0f} points below the control's, no stop by the entropy guard.

| bound | correction | staleness mean / max | entropy first → last quarter (max) | clip fraction | ESS | tokens zeroed | held-out (greedy, {args.eval_size}) | holds |
|---|---|---:|---|---:|---:|---:|---|---|
{chr(10).join(rows)}

Holding: {"; ".join(verdict)}.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bounds", default=",".join(map(str, BOUNDS)))
    ap.add_argument("--corrections", default=",".join(CORRECTIONS))
    ap.add_argument("--in-flight", type=int, default=24, help="groups generating at once")
    ap.add_argument("--ppo-epochs", type=int, default=1)
    add_run_args(ap, "runs/bench-corrections")
    args = ap.parse_args()
    args.bounds = [int(b) for b in args.bounds.split(",")]
    args.corrections = args.corrections.split(",")
    if args.quick:
        args.steps, args.sft_steps, args.eval_size = 3, 20, 8
        args.bounds, args.corrections = [1, 4], ["decoupled", "geo_mask"]
    if not args.resume:
        shutil.rmtree(args.out, ignore_errors=True)
    t_start = time.time()
    if args.init:
        model, args.init_note = args.init, args.init_note or args.init
    else:
        model = warm_model(args)
        args.init_note = f"a warm start of {args.sft_steps} SFT steps (the main job's recipe, cut short)"

    results: dict[tuple[int, str], dict[str, Any]] = {}
    for bound, name in cells(args):
        run_dir = args.out / f"s{bound}-{slug(name)}"
        done = run_dir / "stats.json"
        if args.resume and done.exists():
            results[(bound, name)] = json.loads(done.read_text())
            continue
        shutil.rmtree(run_dir, ignore_errors=True)
        ahead = {"mode": "async", "max_staleness": bound, "max_groups_in_flight": args.in_flight}
        cfg = base_config(
            run_dir,
            args,
            model={"path": model},
            learner={"correction": name, "ppo_epochs": args.ppo_epochs},
            tasks={"seed": args.seed},
            run={"seed": args.seed},
            **{"async": {"mode": "sync", "partial_rollouts": False} if bound == 0 else ahead},
        )
        summary = asyncio.run(Trainer(cfg).run())
        stats = run_stats(run_dir, summary)
        done.write_text(json.dumps(stats, indent=1))
        results[(bound, name)] = stats
        print(
            f"staleness {bound} {name}: staleness {stats['staleness_mean']:.2f}, entropy "
            f"{stats['entropy_first']:.3f} -> {stats['entropy_last']:.3f}, held-out "
            f"{stats['before']:.1%} -> {stats['after']:.1%}",
            flush=True,
        )
        text = report(args, results, time.time() - t_start)  # after every run: a cut run leaves its table
        (RESULTS / ("corrections-quick.md" if args.quick else "corrections.md")).write_text(text)
    print(report(args, results, time.time() - t_start))


if __name__ == "__main__":
    main()
