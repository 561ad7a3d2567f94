"""Sokoban benchmark: env steps per second of arborl/Sokoban-v0 against its baselines, one run.

1. steps: random replies on the rooms of sokoban-6x6, as
   - gym-sokoban's own `SokobanEnv.step` (its `tiny_rgb_array` observation), if gym_sokoban
     imports (it is not an arborl dependency: `pip install --no-deps --target DIR
     gym-sokoban==0.0.6 gym==0.26.2 gym-notices==0.1.0 imageio==2.38.1`, then PYTHONPATH=DIR);
   - a plain loop over arborl's rules (`game.push`, `move_reward`, `render_grid`): the game
     without the env;
   - `env.step(reply)` of arborl/Sokoban-v0 (the sync API: projection, verl-agent's prompt,
     state hash, the hop onto the env event loop), and `astep` on 32 envs at once on one loop.
2. levels: generated rooms per second, arborl's `generate_level` (with its solver check)
   against gym-sokoban's `reset` (room generation), if it imports.

Ratios are against the plain loop measured in the same run (the machine is shared and noisy).
Writes bench/results/sokoban.md.

    python bench/bench_sokoban.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import gymnasium

import arborl.envs  # noqa: F401 - registers the ids
from arborl.tasks import get_suite
from arborl.tasks.sokoban.game import DIRECTIONS, move_reward, push, render_grid
from arborl.tasks.sokoban.levels import generate_level

OUT = Path(__file__).resolve().parent / "results" / "sokoban.md"
MOVES = list(DIRECTIONS)
REPLIES = [f"<think>.</think><action>{m.lower()}</action>" for m in MOVES]


def rate(n: int, run: Callable[[int], None]) -> float:
    start = time.perf_counter()
    run(n)
    return n / (time.perf_counter() - start)


def plain_loop(tasks, n: int) -> None:
    rng = random.Random(0)
    board, i = tasks[0].board(), 0
    for k in range(n):
        if k % 15 == 0:
            i += 1
            board = tasks[i % len(tasks)].board()
        after = push(board, rng.choice(MOVES))
        move_reward(board, after)
        render_grid(after)
        board = after


def arborl_sync(tasks, n: int) -> None:
    rng = random.Random(0)
    env = gymnasium.make("arborl/Sokoban-v0")
    done, i = True, 0
    for _ in range(n):
        if done:
            i += 1
            env.reset(options={"task": tasks[i % len(tasks)]})
        _, _, terminated, truncated, _ = env.step(rng.choice(REPLIES))
        done = terminated or truncated
    env.close()


async def arborl_async(tasks, n: int, width: int = 32) -> None:
    async def worker(w: int, steps: int) -> None:
        rng = random.Random(w)
        env = gymnasium.make("arborl/Sokoban-v0").unwrapped
        done, i = True, w
        for _ in range(steps):
            if done:
                i += width
                await env.areset(options={"task": tasks[i % len(tasks)]})
            _, _, terminated, truncated, _ = await env.astep(rng.choice(REPLIES))
            done = terminated or truncated

    await asyncio.gather(*(worker(w, n // width) for w in range(width)))


def gym_sokoban():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from gym_sokoban.envs.sokoban_env import SokobanEnv
    except ImportError:
        return None
    return SokobanEnv


def gym_sokoban_steps(cls, n: int) -> None:
    rng = random.Random(0)
    env = cls(dim_room=(6, 6), num_boxes=1, max_steps=15)
    for k in range(n):
        if k and k % 15 == 0:
            env.num_env_steps = 0  # a new episode without paying for room generation
        env.step(rng.randint(1, 4), observation_mode="tiny_rgb_array")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n, levels = (2000, 20) if args.quick else (20000, 200)
    tasks = get_suite("sokoban-6x6").tasks()
    cls = gym_sokoban()
    plain = rate(n, lambda k: plain_loop(tasks, k))
    rows = [("plain loop over arborl's rules (baseline)", plain)]
    if cls is not None:
        rows.append(
            ("gym-sokoban `SokobanEnv.step` (tiny_rgb_array)", rate(n, lambda k: gym_sokoban_steps(cls, k)))
        )
    rows.append(("arborl/Sokoban-v0 `env.step` (sync)", rate(n, lambda k: arborl_sync(tasks, k))))
    rows.append(
        (
            "arborl/Sokoban-v0 `astep`, 32 envs on one loop",
            rate(n, lambda k: asyncio.run(arborl_async(tasks, k))),
        )
    )
    gen = [
        (
            "arborl `generate_level` (+ BFS solver check)",
            rate(levels, lambda k: [generate_level(f"b{i}") for i in range(k)]),
        )
    ]
    if cls is not None:
        env = cls(dim_room=(6, 6), num_boxes=1, max_steps=15, reset=False)
        gen.append(
            (
                "gym-sokoban `reset` (room generation)",
                rate(max(levels // 10, 5), lambda k: [env.reset() for _ in range(k)]),
            )
        )
    lines = [
        f"# Sokoban: env steps per second ({platform.processor() or platform.machine()}, {n} steps each, one run)",
        "",
        "| stepping | steps/s | × plain loop |",
        "|---|---|---|",
        *(f"| {name} | {r:,.0f} | {r / plain:.2f} |" for name, r in rows),
        "",
        "| room generation | rooms/s | × arborl |",
        "|---|---|---|",
        *(f"| {name} | {r:,.1f} | {r / gen[0][1]:.2f} |" for name, r in gen),
    ]
    if cls is None:
        lines += ["", "gym_sokoban was not importable: its rows are missing (see the module doc)."]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
