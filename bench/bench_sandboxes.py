"""Sandbox benchmark: warm pool vs a fresh sandbox per episode, in-place reset vs recreate.

Everything is measured in one run and reported as ratios against the naive baseline of the
same run (the machine is shared and noisy). Writes bench/results/sandboxes.md.

    python bench/bench_sandboxes.py [--quick] [--backends docker,bwrap]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np

from arborl.sandboxes import (
    PoolConfig,
    SandboxBackend,
    SandboxPool,
    SandboxSpec,
    SandboxUnavailable,
    make_backend,
)

# One-command episodes: a shell one-liner (harness-bound) and a Python start (workload-bound:
# ~18 ms of CPU each, which caps any harness at ~100 episodes/s on 2 cores).
EPISODES = {
    "shell one-liner": ("wc -l < /workspace/repo/main.py", b"50"),
    "python3 -c": ("python3 -c 'print(sum(range(1000)))'", b"499500"),
}
RESULTS = Path(__file__).with_name("results")


def pct(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1e3, q))


async def throughput(n: int, concurrency: int, episode: Callable[[], Awaitable[None]]) -> float:
    """Episodes per second for `n` episodes, `concurrency` at a time."""
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            await episode()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - start)


async def bench_backend(backend: SandboxBackend, quick: bool) -> list[tuple[str, str, str, str]]:
    spec = SandboxSpec(files={"/workspace/repo/main.py": "print('hello')\n" * 50})
    conc = 4
    n_pool, n_naive = (40, 8) if quick else (200, 24)
    rows: list[tuple[str, str, str, str]] = []

    # -- warm pool: acquire + exec + release (reset runs in the background) --------------
    pool_tp: dict[str, float] = {}
    async with SandboxPool(
        backend, PoolConfig(max_size=conc, health_interval_s=0, reap_on_start=False)
    ) as pool:
        await pool.warm(spec, conc)
        for name, (cmd, expected) in EPISODES.items():

            async def pooled(cmd: str = cmd, expected: bytes = expected) -> None:
                async with pool.acquire(spec) as sb:
                    res = await sb.exec(cmd)
                    assert res.stdout.strip() == expected.decode(), res.output

            await throughput(conc, conc, pooled)  # warm-up
            await pool.drain()
            pool_tp[name] = await throughput(n_pool, conc, pooled)
            await pool.drain()

        acquire, reset = [], []
        for _ in range(50 if quick else 200):
            t = time.perf_counter()
            sb = await pool.checkout(spec)
            acquire.append(time.perf_counter() - t)
            await sb.exec("echo x > /workspace/repo/new.txt; rm /workspace/repo/main.py")
            pool.checkin(sb)
            await pool.drain()
        async with pool.acquire(spec) as sb:
            for _ in range(30 if quick else 100):
                await sb.exec("echo dirty > /workspace/repo/main.py; sleep 60 &")
                reset.append((await sb.reset()).total_s)
            channel = []
            for _ in range(100 if quick else 300):
                t = time.perf_counter()
                await sb.exec(["true"])
                channel.append(time.perf_counter() - t)
            docker_exec = []
            if backend.name == "docker":
                for _ in range(20 if quick else 60):
                    t = time.perf_counter()
                    await asyncio.to_thread(sb.handle.exec_run, ["true"])
                    docker_exec.append(time.perf_counter() - t)

    # -- reset of a repository-sized tree: 2,000 files, one edited, one written through a map --
    big = SandboxSpec(files={f"/workspace/repo/pkg{i // 100}/m{i}.py": f"X = {i}\n" for i in range(2000)})
    big_reset: list[float] = []
    mmap_write = (
        'python3 -c \'import mmap,os;m=mmap.mmap(os.open("repo/pkg3/m300.py",os.O_RDWR),0);'
        'm[:];m[:]=m[:].replace(b"300",b"999")\''
    )
    config = PoolConfig(max_size=1, health_interval_s=0, reap_on_start=False)
    async with SandboxPool(backend, config) as pool, pool.acquire(big) as sb:
        await sb.reset()  # the first reset after a snapshot copies everything
        for _ in range(10 if quick else 40):
            await sb.exec(f"echo dirty > /workspace/repo/pkg1/m100.py; {mmap_write}")
            big_reset.append((await sb.reset()).total_s)
        check = await sb.exec("cat /workspace/repo/pkg1/m100.py /workspace/repo/pkg3/m300.py")
        assert check.stdout == "X = 100\nX = 300\n", check.output

    # -- naive: a fresh sandbox per episode ---------------------------------------------------
    recreate: list[float] = []
    naive_tp: dict[str, float] = {}
    executor = concurrent.futures.ThreadPoolExecutor(conc)
    client = getattr(backend, "client", None)
    for name, (cmd, expected) in EPISODES.items():
        if client is not None:
            # The baseline gets the benefit of the doubt: it does not write the task's files
            # into its fresh container first, it reads a file the image already has.

            def docker_run(cmd: str = cmd, expected: bytes = expected) -> None:
                t = time.perf_counter()
                out = client.containers.run(
                    spec.image,
                    ["bash", "-c", cmd.replace("/workspace/repo/main.py", "/etc/hostname")],
                    remove=True,
                    network_mode="none",
                )
                recreate.append(time.perf_counter() - t)
                assert out.strip() == (b"1" if expected == b"50" else expected)

            async def naive(fn: Callable[[], None] = docker_run) -> None:
                await asyncio.get_running_loop().run_in_executor(executor, fn)

            naive_name = "`docker run --rm` per episode"
        else:

            async def naive(cmd: str = cmd, expected: bytes = expected) -> None:
                t = time.perf_counter()
                async with await backend.create(spec) as sb:
                    assert (await sb.exec(cmd)).stdout.strip() == expected.decode()
                recreate.append(time.perf_counter() - t)

            naive_name = "new bwrap sandbox per episode"
        naive_tp[name] = await throughput(n_naive, conc, naive)
        rows.append(
            (
                f"episodes/s, {name} (4 concurrent)",
                f"{pool_tp[name]:.1f} (warm pool)",
                f"{naive_tp[name]:.2f} ({naive_name})",
                f"**{pool_tp[name] / naive_tp[name]:.1f}×**",
            )
        )

    rows.append(("acquire p50 / p99", f"{pct(acquire, 50):.2f} / {pct(acquire, 99):.2f} ms", "", ""))
    rows.append(
        (
            "reset vs recreate p50",
            f"{pct(reset, 50):.1f} ms (in place; p99 {pct(reset, 99):.1f})",
            f"{pct(recreate, 50):.0f} ms (p99 {pct(recreate, 99):.0f})",
            f"**{statistics.median(recreate) / statistics.median(reset):.0f}×**",
        )
    )
    rows.append(
        (
            "reset vs recreate p50, 2,000-file tree (a file edited, one written through a shared map)",
            f"{pct(big_reset, 50):.1f} ms (in place; p99 {pct(big_reset, 99):.1f})",
            f"{pct(recreate, 50):.0f} ms (the small tree's recreate)",
            f"**{statistics.median(recreate) / statistics.median(big_reset):.0f}×**",
        )
    )
    if docker_exec:
        rows.append(
            (
                "exec `true` p50",
                f"{pct(channel, 50):.2f} ms (channel)",
                f"{pct(docker_exec, 50):.1f} ms (`docker exec`)",
                f"**{statistics.median(docker_exec) / statistics.median(channel):.0f}×**",
            )
        )
    else:
        rows.append(("exec `true` p50 / p99", f"{pct(channel, 50):.2f} / {pct(channel, 99):.2f} ms", "", ""))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer episodes (a smoke run)")
    ap.add_argument("--backends", default="docker,bwrap")
    args = ap.parse_args()
    lines = [
        "| backend | measure | arborl | naive baseline | ratio |",
        "|---|---|---|---|---|",
    ]
    for name in args.backends.split(","):
        try:
            backend = make_backend({"type": name})
        except SandboxUnavailable as e:
            lines.append(f"| {name} | skipped: {e} | | | |")
            continue
        for measure, ours, naive, ratio in asyncio.run(bench_backend(backend, args.quick)):
            lines.append(f"| {name} | {measure} | {ours} | {naive} | {ratio} |")
    table = "\n".join(lines)
    RESULTS.mkdir(exist_ok=True)
    header = f"# Sandbox benchmark ({time.strftime('%Y-%m-%d')}, {'quick' if args.quick else 'full'} run)\n\n"
    (RESULTS / "sandboxes.md").write_text(header + table + "\n")
    print(table)


if __name__ == "__main__":
    main()
