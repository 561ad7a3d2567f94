"""Evaluation benchmark: instance images vs repository files, and runner concurrency.

1. Starting a swe-mini sandbox: the portable form (the repository written file by file,
   the environment installed and `git init` run as setup) against the instance image (all
   of that already in the image layers). Sandboxes are created alternately, so both see the
   same machine load; reported as the ratio of medians.
2. `arborl eval` throughput on swe-mini with the gold agent: `concurrency=1` (the baseline)
   against `concurrency=4`, same run, instance images; reported as the ratio of instances/s.

    python bench/bench_eval.py [--quick]         # writes bench/results/eval.md
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import gymnasium
from rich.console import Console

import arborl.envs  # noqa: F401
from arborl.envs.code.instance_images import instance_image
from arborl.eval.config import EvalConfig
from arborl.eval.runner import run_eval
from arborl.sandboxes import DockerBackend
from arborl.tasks import get_suite
from arborl.tasks.swebench import swe_parts, to_code_task

RESULTS = Path(__file__).with_name("results")


async def sandbox_starts(backend: DockerBackend, rounds: int) -> dict[str, list[float]]:
    tasks = get_suite("swe-mini").tasks()[:3]
    make = gymnasium.make("arborl/Code-v0").unwrapped
    specs: dict[str, list] = {"repository files": [], "instance image": []}
    for task in tasks:
        inst, env = swe_parts(task)
        imaged = to_code_task(inst, env, image=instance_image(task, backend.client))
        specs["repository files"].append(make.sandbox_spec(task))
        specs["instance image"].append(make.sandbox_spec(imaged))
    times: dict[str, list[float]] = {k: [] for k in specs}
    for i in range(rounds):
        for kind, kind_specs in specs.items():
            start = time.perf_counter()
            sb = await backend.create(kind_specs[i % len(kind_specs)])
            times[kind].append(time.perf_counter() - start)
            await sb.close()
    return times


async def throughput(limit: int, concurrency: int, root: Path) -> float:
    cfg = EvalConfig(
        suite="swe-mini",
        agent="gold",
        limit=limit,
        concurrency=concurrency,
        report=False,
        run={"dir": str(root / f"c{concurrency}")},
    )
    start = time.perf_counter()
    outcome = await run_eval(cfg, sandbox={"type": "docker"}, console=Console(quiet=True))
    assert outcome.summary["resolved_rate"] == 1.0, outcome.summary
    return limit / (time.perf_counter() - start)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    backend = DockerBackend()
    load = os.getloadavg()[0]
    times = asyncio.run(sandbox_starts(backend, 4 if args.quick else 12))
    limit = 4 if args.quick else 12
    with tempfile.TemporaryDirectory() as tmp:
        rates = {c: asyncio.run(throughput(limit, c, Path(tmp))) for c in (1, 4)}
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["repository files"]
    lines = [
        "# Evaluation benchmark",
        "",
        f"`python bench/bench_eval.py{' --quick' if args.quick else ''}` on {os.uname().nodename} "
        f"({os.cpu_count()} cores, Docker); 1-min load average {load:.1f} before, {os.getloadavg()[0]:.1f} after.",
        "",
        "| swe-mini sandbox start | median ms | p90 ms | vs repository files |",
        "|---|---:|---:|---:|",
    ]
    for kind, values in times.items():
        p90 = sorted(values)[int(0.9 * (len(values) - 1))]
        lines.append(f"| {kind} | {med[kind] * 1e3:.0f} | {p90 * 1e3:.0f} | {base / med[kind]:.2f}x faster |")
    lines += [
        "",
        f"| `arborl eval` swe-mini gold, {limit} instances | instances/s | vs concurrency 1 |",
        "|---|---:|---:|",
        *(f"| concurrency {c} | {r:.2f} | {r / rates[1]:.2f}x |" for c, r in rates.items()),
        "",
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "eval.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
