"""The credit estimators' fast loops (numba, `arborl.agents.credit`) against plain Python:
discounted returns and GAE over turns, GiGPO's anchor-state groups, tree values.

    python bench/bench_credit.py [--quick] [--out PATH]

Prints a Markdown table and writes it to bench/results/credit.md. The machine is shared and
noisy, so the number that matters is the speed-up, a ratio within one run.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "credit.md"


def py_returns(rewards: list, offsets: list, gamma: float) -> list:
    out = [0.0] * len(rewards)
    for k in range(len(offsets) - 1):
        acc = 0.0
        for i in range(offsets[k + 1] - 1, offsets[k] - 1, -1):
            acc = rewards[i] + gamma * acc
            out[i] = acc
    return out


def py_gae(rewards: list, values: list, offsets: list, gamma: float, lam: float) -> list:
    adv = [0.0] * len(rewards)
    for k in range(len(offsets) - 1):
        acc, next_value = 0.0, 0.0
        for i in range(offsets[k + 1] - 1, offsets[k] - 1, -1):
            acc = rewards[i] + gamma * next_value - values[i] + gamma * lam * acc
            adv[i] = acc
            next_value = values[i]
    return adv


def py_gigpo(scores: list, groups: list, states: list, eps: float = 1e-6) -> list:
    members: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, key in enumerate(zip(groups, states, strict=True)):
        members[key].append(i)
    adv = [0.0] * len(scores)
    for idx in members.values():
        mean, std = scores[idx[0]], 1.0  # a lone step: advantage 0 (GiGPO)
        if len(idx) > 1:
            vals = [scores[i] for i in idx]
            mean = sum(vals) / len(vals)
            std = math.sqrt(sum((x - mean) ** 2 for x in vals) / (len(vals) - 1))
        for i in idx:
            adv[i] = (scores[i] - mean) / (std + eps)
    return adv


def py_tree(parents: list, rewards: list) -> tuple[list, list]:
    n = len(parents)
    total, count = [0.0] * n, [0] * n
    for i in range(n - 1, -1, -1):
        if count[i] == 0:
            total[i], count[i] = rewards[i], 1
        p = parents[i]
        if p >= 0:
            total[p] += total[i]
            count[p] += count[i]
    values = [t / c for t, c in zip(total, count, strict=True)]
    return values, [values[i] - values[p] if p >= 0 else 0.0 for i, p in enumerate(parents)]


def _best_of(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def credit_data(n_traj: int, mean_len: int, seed: int = 0) -> dict:
    """Ragged trajectories in groups of 8 rollouts; steps draw anchor states from a per-group
    pool (so identical states recur across a group's rollouts); a forest of 100-node trees."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 2 * mean_len, n_traj)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n = int(offsets[-1])
    groups = np.repeat(np.arange(n_traj) // 8, lengths)
    pool = rng.integers(-(2**62), 2**62, (n_traj // 8 + 1, 100))
    states = pool[groups, rng.integers(0, 100, n)]
    tree_size = 100
    local = np.array([-1] + [int(rng.integers(max(0, i - 5), i)) for i in range(1, tree_size)])
    n_trees = n // tree_size
    parents = np.concatenate([np.where(local >= 0, local + t * tree_size, -1) for t in range(n_trees)])
    return {
        "offsets": offsets,
        "rewards": rng.normal(size=n),
        "values": rng.normal(size=n),
        "groups": groups,
        "states": states,
        "parents": parents.astype(np.int64),
        "leaf_rewards": rng.normal(size=parents.shape[0]),
    }


def _threading_layer() -> str:
    """The threading layer numba chose (it chooses at the first parallel launch)."""
    import numba
    from numba import njit, prange

    @njit(parallel=True)
    def touch(x):  # pragma: no cover - compiled
        for i in prange(x.shape[0]):
            x[i] = i

    touch(np.empty(4))
    return str(numba.threading_layer())


def bench_credit(quick: bool) -> str:
    import numba

    from arborl.agents.credit._parallel import free_cores
    from arborl.agents.credit.gigpo import gigpo_step_advantages
    from arborl.agents.credit.tree import tree_credit
    from arborl.agents.credit.turns import discounted_returns, gae

    n_traj, mean_len = (1000, 100) if quick else (10_000, 100)
    d = credit_data(n_traj, mean_len)
    lists = {k: v.tolist() for k, v in d.items()}
    cases = {
        "discounted returns": (
            lambda: discounted_returns(d["rewards"], d["offsets"], 0.99),
            lambda: py_returns(lists["rewards"], lists["offsets"], 0.99),
        ),
        "GAE over turns": (
            lambda: gae(d["rewards"], d["values"], d["offsets"], 0.99, 0.95),
            lambda: py_gae(lists["rewards"], lists["values"], lists["offsets"], 0.99, 0.95),
        ),
        "GiGPO anchor-state groups": (
            lambda: gigpo_step_advantages(d["rewards"], d["groups"], d["states"]),
            lambda: py_gigpo(lists["rewards"], lists["groups"], lists["states"]),
        ),
        "tree values + fork advantages": (
            lambda: tree_credit(d["parents"], d["leaf_rewards"]),
            lambda: py_tree(lists["parents"], lists["leaf_rewards"]),
        ),
    }
    n_steps = int(d["offsets"][-1])
    load = os.getloadavg()[0]
    rows = [
        f"{n_steps:,} steps in {n_traj:,} trajectories (groups of 8); trees: "
        f"{d['parents'].shape[0]:,} nodes in 100-node trees. Best of 7 (numba, after compiling) / 3 (Python). "
        f"numba: {_threading_layer()} threading layer, {numba.get_num_threads()} threads; "
        f"load average {load:.1f} at the start (the kernels use as many threads as the load leaves "
        f"cores free: {free_cores()} now). The 1-thread column forces the serial kernels.\n",
        "| kernel | numba (auto threads) | numba (1 thread) | plain Python | speed-up (auto) | speed-up (1 thread) |",
        "|---|---|---|---|---|---|",
    ]
    for name, (fast, slow) in cases.items():
        fast()  # compile (or load numba's cache)
        t_fast = _best_of(fast, 7)
        previous = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            t_one = _best_of(fast, 7)
        finally:
            numba.set_num_threads(previous)
        t_slow = _best_of(slow, 3)
        rows.append(
            f"| {name} | {t_fast * 1e3:.2f} ms | {t_one * 1e3:.2f} ms | {t_slow * 1e3:.0f} ms "
            f"| {t_slow / t_fast:.0f}× | {t_slow / t_one:.0f}× |"
        )
        print("  " + rows[-1], flush=True)
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100k steps instead of 1M (a smoke run)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    print("credit loops:", flush=True)
    text = "\n".join(
        [
            "# Credit loops benchmark\n",
            f"`python bench/bench_credit.py{' --quick' if args.quick else ''}` on "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"{time.strftime('%Y-%m-%d %H:%M')}. Ratios are within this run; absolute times are noisy "
            "(shared machine).\n",
            "## numba loops vs plain Python\n",
            bench_credit(args.quick),
            "",
        ]
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"\n{text}\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
