"""Env benchmark: framework overhead per step, and concurrent vs sequential episodes.

1. Overhead per step, sandbox work excluded: each step's `info["timing"]["overhead_s"]`
   (wall time of the step minus the time spent waiting on the sandbox), for the code env
   (a cheap `bash` call, state hash on) and the tool env (a host-side tool, no sandbox),
   plus the cost of the sync API's hop onto the env loop. Target: <= 1 ms.
2. Throughput: N scripted episodes of the default code task (view, edit, run tests, submit:
   two pytest runs each) on a pool of P sandboxes, all N at once on one event loop vs one
   after another, without and with a simulated model latency per turn. Reported as a ratio
   measured in the same run (the machine is shared and noisy).

Writes bench/results/envs.md (and .json).

    python bench/bench_envs.py [--quick] [--backend docker|local|auto] [--episodes 64] [--pool 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

import arborl.envs
from arborl.envs import aclose, areset, astep
from arborl.envs.episodes import run_episodes
from arborl.envs.event_loop import get_env_loop
from arborl.envs.parsers import get_parser
from arborl.sandboxes import PoolConfig, SandboxPool, make_backend
from arborl.tasks import ToolTask

RESULTS = Path(__file__).with_name("results")
P = get_parser("hermes")
SCRIPT = [
    P.format_call("str_replace_editor", {"command": "view", "path": "calc.py"}),
    P.format_call(
        "str_replace_editor",
        {"command": "str_replace", "path": "calc.py", "old_str": "a - b", "new_str": "a + b"},
    ),
    P.format_call("run_tests", {}),
    P.format_call("submit", {}),
]


def ms(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1e3, q))


async def overhead_code(backend: Any, steps: int) -> list[float]:
    env = gymnasium.make("arborl/Code-v0", backend=backend)
    await areset(env)
    action = P.format_call("bash", {"command": "true"})
    out = []
    for _ in range(steps):
        *_, info = await astep(env, action)
        out.append(info["timing"]["overhead_s"])
    await aclose(env)
    return out


def tool_task() -> ToolTask:
    return ToolTask(
        id="bench",
        question="q",
        builtin_tools=("search",),
        corpus=[{"id": f"d{i}", "title": f"doc {i}", "text": f"word{i} common text"} for i in range(50)],
    )


async def overhead_tool(steps: int) -> list[float]:
    env = gymnasium.make("arborl/Tool-v0")
    await areset(env, options={"task": tool_task()})
    action = P.format_call("search", {"query": "word7 common", "k": 2})
    out = []
    for _ in range(steps):
        *_, info = await astep(env, action)
        out.append(info["timing"]["overhead_s"])
    return out


def sync_hop(steps: int) -> list[float]:
    """Wall time of sync `env.step` minus the step's own time: the hop onto the env loop."""
    env = gymnasium.make("arborl/Tool-v0")
    env.reset(options={"task": tool_task()})
    action = P.format_call("search", {"query": "word7", "k": 1})
    out = []
    for _ in range(steps):
        start = time.perf_counter()
        *_, info = env.step(action)
        out.append(time.perf_counter() - start - info["timing"]["step_s"])
    return out


def scripted(latency_s: float):
    async def policy(messages: list[dict], info: dict) -> str:
        if latency_s:
            await asyncio.sleep(latency_s)  # the model generating its reply
        turn = sum(m["role"] == "assistant" for m in messages)
        return SCRIPT[min(turn, len(SCRIPT) - 1)]

    return policy


async def throughput(backend: Any, n: int, pool_size: int, latency_s: float) -> dict[str, float]:
    tasks = [arborl.envs.code.DEFAULT_TASK.model_copy(update={"id": f"t{i}"}) for i in range(n)]
    async with SandboxPool(backend, PoolConfig(max_size=pool_size)) as pool:
        await pool.warm(arborl.envs.code.CodeEnv().sandbox_spec(tasks[0]), pool_size)
        seq_env = [gymnasium.make("arborl/Code-v0", pool=pool)]
        start = time.perf_counter()
        seq = await run_episodes(seq_env, scripted(latency_s), tasks, max_turns=6)
        t_seq = time.perf_counter() - start
        await pool.drain()
        envs = [gymnasium.make("arborl/Code-v0", pool=pool) for _ in range(n)]
        start = time.perf_counter()
        conc = await run_episodes(envs, scripted(latency_s), tasks, max_turns=6)
        t_conc = time.perf_counter() - start
        await pool.drain()
    solved = sum(e.total_reward == 1.0 for e in seq + conc)
    assert solved == 2 * n, (
        f"only {solved}/{2 * n} episodes solved: {[e.error for e in seq + conc if e.error][:3]}"
    )
    return {"sequential_s": t_seq, "concurrent_s": t_conc, "ratio": t_seq / t_conc}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="auto", help="docker, bwrap or auto")
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--pool", type=int, default=8)
    ap.add_argument("--latency", type=float, default=0.5, help="simulated model latency per turn (s)")
    ap.add_argument("--quick", action="store_true", help="fewer steps and episodes (a smoke run)")
    args = ap.parse_args()
    steps = 50 if args.quick else 500
    n = 8 if args.quick else args.episodes
    backend = make_backend({"type": args.backend})
    rt = get_env_loop()
    load_before = os.getloadavg()[0]

    code = rt.run(overhead_code(backend, steps))
    tool = rt.run(overhead_tool(steps))
    hop = sync_hop(steps)
    runs = {lat: rt.run(throughput(backend, n, args.pool, lat)) for lat in (0.0, args.latency)}
    load_after = os.getloadavg()[0]

    rows = [
        ("code env step (bash `true`), overhead", code),
        ("tool env step (host search tool), overhead", tool),
        ("sync API hop onto the env loop", hop),
    ]
    lines = [
        "# Env benchmark",
        "",
        f"`python bench/bench_envs.py{' --quick' if args.quick else ''}` on {platform.node()} "
        f"({os.cpu_count()} cores, backend: {backend.name}), {time.strftime('%Y-%m-%d')}; "
        f"1-min load average {load_before:.1f} before, {load_after:.1f} after (others share the machine).",
        "",
        "## Framework overhead per step (sandbox work excluded; target <= 1 ms)",
        "",
        "| what | p50 ms | p95 ms | mean ms | steps |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, samples in rows:
        mean = statistics.fmean(samples) * 1e3
        lines.append(
            f"| {name} | {ms(samples, 50):.3f} | {ms(samples, 95):.3f} | {mean:.3f} | {len(samples)} |"
        )
    lines += [
        "",
        f"## {n} episodes on a pool of {args.pool} sandboxes: concurrent (one event loop) vs sequential",
        "",
        "Each episode: view, edit, `run_tests`, `submit` (two pytest runs in the sandbox).",
        "",
        "| model latency per turn | sequential s | concurrent s | speed-up |",
        "|---|---:|---:|---:|",
    ]
    for lat, r in runs.items():
        lines.append(f"| {lat:g} s | {r['sequential_s']:.1f} | {r['concurrent_s']:.1f} | {r['ratio']:.1f}x |")
    lines += [
        "",
        "Without model latency the episodes are CPU-bound in the sandboxes (pytest), so the speed-up is",
        "bounded by the cores of the machine; with latency, waiting overlaps and the pool size bounds it.",
    ]
    RESULTS.mkdir(exist_ok=True)
    text = "\n".join(lines) + "\n"
    (RESULTS / "envs.md").write_text(text)
    summary = {name: {"p50_ms": ms(s, 50), "p95_ms": ms(s, 95)} for name, s in rows}
    (RESULTS / "envs.json").write_text(json.dumps({"overhead": summary, "throughput": runs}, indent=2))
    print(text)


if __name__ == "__main__":
    main()
