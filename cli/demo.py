"""`arborl demo`: scripted SWE-style episodes over a warm sandbox pool.

The most complete end-to-end flow until `arborl train` lands: every episode gets a sandbox
holding a small repository with a bug, runs its tests (they fail), fixes the bug, runs them
again (they pass), and gives the sandbox back, which resets it in place. Because sandboxes
are reused, every episode seeing the bug again shows the reset really restored the state.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from arborl.sandboxes import PoolConfig, SandboxPool, SandboxSpec, make_pool

from .config import load_config, section


class DemoConfig(BaseModel):
    """The `demo` section of the Hydra config."""

    model_config = ConfigDict(extra="forbid")

    episodes: int = Field(16, ge=1, description="episodes to run")
    concurrency: int = Field(4, ge=1, description="episodes at a time")


REPO = {
    "/workspace/calc.py": "def add(a, b):\n    return a - b\n",
    "/workspace/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}


async def episode(pool: SandboxPool, spec: SandboxSpec) -> dict[str, Any]:
    start = time.perf_counter()
    async with pool.acquire(spec) as sb:
        before = await sb.exec("python3 -m pytest -q -p no:cacheprovider", timeout=120)
        await sb.exec("sed -i 's/a - b/a + b/' calc.py")
        after = await sb.exec("python3 -m pytest -q -p no:cacheprovider", timeout=120)
    return {
        "bug_seen": before.exit_code != 0,
        "fixed": after.exit_code == 0,
        "seconds": time.perf_counter() - start,
        "sandbox": sb.id,
    }


async def run_demo(cfg: Any, console: Console) -> bool:
    demo = DemoConfig(**section(cfg, "demo"))
    episodes, concurrency = demo.episodes, demo.concurrency
    spec = SandboxSpec(files=REPO)
    pool = make_pool(section(cfg, "sandbox"), PoolConfig(**section(cfg, "pool")))
    where = pool.backend.name if isinstance(pool, SandboxPool) else cfg.sandbox.type
    console.print(f"backend: [bold]{where}[/bold]; {episodes} episodes, {concurrency} at a time")
    async with pool:
        sem = asyncio.Semaphore(concurrency)
        results = []
        with Progress(console=console) as progress:
            bar = progress.add_task("episodes", total=episodes)

            async def one() -> None:
                async with sem:
                    results.append(await episode(pool, spec))
                progress.advance(bar)

            wall = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(episodes)))
            wall = time.perf_counter() - wall
        await pool.drain()
        stats = pool.stats()
    ok = all(r["bug_seen"] and r["fixed"] for r in results)
    table = Table("metric", "count", "p50 ms", "p99 ms", title="sandbox pool latency")
    for name, s in stats.get("latency", {}).items():  # a pool over many hosts has none
        table.add_row(name, f"{s['count']:.0f}", f"{s['p50_ms']:.1f}", f"{s['p99_ms']:.1f}")
    console.print(table)
    reused = len(results) - len({r["sandbox"] for r in results})
    console.print(
        f"{sum(r['fixed'] for r in results)}/{episodes} episodes fixed the bug, "
        f"{sum(r['bug_seen'] for r in results)}/{episodes} started from the clean buggy state "
        f"({reused} on a reused, reset sandbox); {episodes / wall:.1f} episodes/s"
    )
    console.print("[green]demo passed[/green]" if ok else "[red]demo FAILED[/red]")
    return ok


def cmd_demo(args: argparse.Namespace) -> int:
    return 0 if asyncio.run(run_demo(load_config(args.overrides), Console())) else 1


def register(add: Any) -> None:
    sp = add("demo", "scripted SWE-style episodes over a warm sandbox pool (end-to-end check)", cmd_demo)
    sp.add_argument("overrides", nargs="*", help="Hydra overrides (key=value)")
