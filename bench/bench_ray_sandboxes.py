"""What the Ray hop costs: sandboxes through `RaySandboxPool` against the local `SandboxPool`.

One run starts a Ray cluster of 3 nodes in this process (`ray.cluster_utils.Cluster`) and
measures, as ratios within the run (the machine is shared and noisy):

- a command round trip (`exec true`) and a reset in place, local pool vs through Ray;
- eval throughput (short episodes, `PER_NODE` at a time per node, on warm sandboxes) on 1, 2
  and 3 nodes.

Every node here shares this machine's cores, so more nodes add room, not CPU: the throughput
ratio shows that spreading costs nothing and where the harness saturates, not the speed-up
real hosts would give. Writes bench/results/ray-sandboxes-<backend>.md.

    python bench/bench_ray_sandboxes.py [--quick] [--backend bwrap|docker]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from ray_cluster import FAST_HEALTH

from arborl.sandboxes import PoolConfig, SandboxPool, SandboxSpec, make_backend
from arborl.sandboxes.ray import RayPoolConfig, RaySandboxPool

RESULTS = Path(__file__).with_name("results")
PER_NODE = 3
SPEC = SandboxSpec(files={"/workspace/main.py": "print('hello')\n" * 50})
# node i offers sandboxes to pools asking for "first<k>" with k > i: a pool over 1, 2 or 3 nodes
NODES = [{f"first{k}": 1 for k in range(i + 1, 4)} for i in range(3)]


def ms(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1e3, q))


async def round_trips(pool: Any, n: int) -> tuple[list[float], list[float]]:
    """(exec `true` times, reset times) on one sandbox of `pool`."""
    execs, resets = [], []
    async with pool.acquire(SPEC) as sb:
        for _ in range(n):
            t = time.perf_counter()
            await sb.exec("true")
            execs.append(time.perf_counter() - t)
        for _ in range(max(10, n // 5)):
            await sb.exec("echo x > /workspace/dirt")
            t = time.perf_counter()
            await sb.reset()
            resets.append(time.perf_counter() - t)
    return execs, resets


async def throughput(pool: Any, n: int, concurrency: int) -> float:
    room = asyncio.Semaphore(concurrency)

    async def episode() -> None:
        async with room, pool.acquire(SPEC) as sb:
            await sb.write_file("/workspace/in.txt", "3\n")
            res = await sb.exec("python3 -c 'print(sum(range(int(open(\"in.txt\").read()))))'")
            assert res.stdout.strip() == "3", res.output

    await asyncio.gather(*(episode() for _ in range(concurrency)))  # warm: sandboxes made, not timed
    start = time.perf_counter()
    await asyncio.gather(*(episode() for _ in range(n)))
    return n / (time.perf_counter() - start)


def ray_pool(backend: str, nodes: int) -> RaySandboxPool:
    return RaySandboxPool(
        RayPoolConfig(
            backend={"type": backend},
            pool=PoolConfig(max_size=PER_NODE, health_interval_s=0),
            node_resource=f"first{nodes}",
        )
    )


async def measure(backend: str, quick: bool) -> list[str]:
    n_rt, n_ep = (100, 30) if quick else (400, 90)
    lines = ["| measure | local pool | through Ray (1 node) | ratio |", "|---|---|---|---|"]
    async with SandboxPool(
        make_backend({"type": backend}), PoolConfig(max_size=PER_NODE, health_interval_s=0)
    ) as local:
        l_exec, l_reset = await round_trips(local, n_rt)
        l_tp = await throughput(local, n_ep, PER_NODE)
    async with ray_pool(backend, 1) as pool:
        r_exec, r_reset = await round_trips(pool, n_rt)
        r_tp = {1: await throughput(pool, n_ep, PER_NODE)}
    for q in (50, 99):
        lines.append(
            f"| exec `true` p{q} | {ms(l_exec, q):.2f} ms | {ms(r_exec, q):.2f} ms | {ms(r_exec, q) / ms(l_exec, q):.2f}× |"
        )
    for q in (50, 99):
        lines.append(
            f"| reset p{q} | {ms(l_reset, q):.2f} ms | {ms(r_reset, q):.2f} ms | {ms(r_reset, q) / ms(l_reset, q):.2f}× |"
        )
    for k in (2, 3):
        async with ray_pool(backend, k) as pool:
            r_tp[k] = await throughput(pool, n_ep, PER_NODE * k)
    lines += [
        "",
        f"| eval episodes/s ({n_ep} episodes, {PER_NODE} at a time per node) | episodes/s | vs local pool | vs 1 node |",
        "|---|---|---|---|",
        f"| local pool | {l_tp:.1f} | 1.00× | |",
    ]
    lines += [
        f"| Ray, {k} node{'s' * (k > 1)} | {r_tp[k]:.1f} | {r_tp[k] / l_tp:.2f}× | {r_tp[k] / r_tp[1]:.2f}× |"
        for k in (1, 2, 3)
    ]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--backend", default="bwrap", choices=["bwrap", "docker"])
    args = ap.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    base = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
    cluster = Cluster(
        initialize_head=True, head_node_args={**base, "resources": NODES[0], "_system_config": FAST_HEALTH}
    )
    try:
        for res in NODES[1:]:
            cluster.add_node(**base, resources=res)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        lines = asyncio.run(measure(args.backend, args.quick))
    finally:
        ray.shutdown()
        cluster.shutdown()
    head = [
        "# Sandboxes through Ray vs the local pool",
        "",
        f"`python bench/bench_ray_sandboxes.py{' --quick' if args.quick else ''} --backend {args.backend}`, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores. "
        "All 3 Ray nodes share this machine: more nodes add room, not CPU.",
        "",
    ]
    text = "\n".join(head + lines) + "\n"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"ray-sandboxes-{args.backend}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
