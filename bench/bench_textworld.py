"""TextWorld benchmark: `arborl/TextWorld-v0` steps per second against TextWorld's own loop.

The baseline is what TextWorld's own agents run: `textworld.start(game, request_infos)` then
`env.reset()` and `env.step(command)`, in-process, with the same `EnvInfos` the env requests
(feedback, description, inventory, score, max score, won, lost, moves, admissible commands).
Both replay the same commands: per game, a seeded sequence of random admissible commands
(recorded from the baseline) followed by the walkthrough. Measured in the same run:

1. sequential: one episode after another, a fresh game each (start/reset counted apart);
2. the env's async API with E episodes at once on one event loop (each game is a process of
   its own, so games step in parallel on the machine's cores).

Writes bench/results/textworld.md.

    python bench/bench_textworld.py [--quick] [--episodes 8] [--noise-steps 30] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import time
from pathlib import Path

import gymnasium
import textworld

import arborl.envs  # noqa: F401  (registers the ids)
from arborl.envs.textworld.process import ALWAYS
from arborl.tasks import get_suite
from arborl.tasks.textworld import TextWorldTask, ensure_game
from arborl.tasks.textworld.policies import walkthrough

RESULTS = Path(__file__).with_name("results")
INFOS = textworld.EnvInfos(**dict.fromkeys((*ALWAYS, "admissible_commands"), True))


def commands_for(task: TextWorldTask, noise_steps: int) -> list[str]:
    """Seeded random admissible commands, then the walkthrough (recorded on TextWorld itself)."""
    env = textworld.start(str(ensure_game(task)), request_infos=INFOS)
    state = env.reset()
    rng, out = random.Random(task.id), []
    for _ in range(noise_steps):
        command = rng.choice([c for c in state["admissible_commands"] if c not in ("eat meal",)])
        state, _, done = env.step(command)
        out.append(command)
        if done:
            break
    env.close()
    return out + walkthrough(task)


def baseline(task: TextWorldTask, commands: list[str], episodes: int) -> tuple[float, float, int]:
    """(start+reset seconds, step seconds, steps) of TextWorld's own loop."""
    game, start_s, step_s, steps = str(ensure_game(task)), 0.0, 0.0, 0
    for _ in range(episodes):
        t = time.perf_counter()
        env = textworld.start(game, request_infos=INFOS)
        env.reset()
        start_s += time.perf_counter() - t
        t = time.perf_counter()
        for c in commands:
            _, _, done = env.step(c)
            steps += 1
            if done:
                break
        step_s += time.perf_counter() - t
        env.close()
    return start_s, step_s, steps


def arborl_sequential(task: TextWorldTask, commands: list[str], episodes: int) -> tuple[float, float, int]:
    env = gymnasium.make("arborl/TextWorld-v0")
    env.reset(options={"task": task})  # starts the game server (once per process), not timed
    start_s, step_s, steps = 0.0, 0.0, 0
    for _ in range(episodes):
        t = time.perf_counter()
        env.reset(options={"task": task})
        start_s += time.perf_counter() - t
        t = time.perf_counter()
        for c in commands:
            *_, terminated, truncated, info = env.step(c)
            assert "sandbox_error" not in info, info
            steps += 1
            if terminated or truncated:
                break
        step_s += time.perf_counter() - t
    env.close()
    return start_s, step_s, steps


async def arborl_concurrent(
    task: TextWorldTask, commands: list[str], episodes: int, width: int
) -> tuple[float, int]:
    envs = [gymnasium.make("arborl/TextWorld-v0") for _ in range(width)]
    queue = list(range(episodes))
    steps = 0

    async def worker(env: gymnasium.Env) -> None:
        nonlocal steps
        while queue:
            queue.pop()
            await env.areset(options={"task": task})
            for c in commands:
                *_, terminated, truncated, _ = await env.astep(c)
                steps += 1
                if terminated or truncated:
                    break

    t = time.perf_counter()
    await asyncio.gather(*(worker(e) for e in envs))
    wall = time.perf_counter() - t
    for e in envs:
        await e.aclose()
    return wall, steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--noise-steps", type=int, default=30)
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args()
    episodes = 2 if args.quick else args.episodes
    rows = []
    load0 = os.getloadavg()[0]
    for suite in ("textworld-coin", "textworld-cooking"):
        task = get_suite(suite).tasks()[0]
        commands = commands_for(task, 5 if args.quick else args.noise_steps)
        b_start, b_step, b_n = baseline(task, commands, episodes)
        a_start, a_step, a_n = arborl_sequential(task, commands, episodes)
        c_wall, c_n = asyncio.run(arborl_concurrent(task, commands, episodes * 2, args.concurrency))
        assert a_n == b_n, (a_n, b_n)
        base = b_n / b_step
        rows.append(
            f"| {task.id} | {b_n // episodes} | {base:.0f} | {1000 * b_start / episodes:.0f} "
            f"| {a_n / a_step:.0f} ({a_n / a_step / base:.2f}x) | {1000 * a_start / episodes:.0f} "
            f"| {c_n / c_wall:.0f} ({c_n / c_wall / base:.2f}x) |"
        )
        print(rows[-1], flush=True)
    text = (
        f"""# TextWorld benchmark

`python bench/bench_textworld.py{" --quick" if args.quick else ""}` on {platform.node()} ({os.cpu_count()} cores),
textworld {textworld.__version__}; 1-min load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after
(the machine is shared). {episodes} episodes per game per loop; each replays the same commands:
random admissible ones, then the walkthrough. Ratios are against TextWorld's own loop in the same run.

| game | steps/episode | textworld.start + step: steps/s | its start+reset ms | TextWorld-v0 step (sync): steps/s | its reset ms | TextWorld-v0 astep, {args.concurrency} at once: steps/s (whole episodes, resets included) |
|---|---:|---:|---:|---:|---:|---:|
"""
        + "\n".join(rows)
        + "\n"
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "textworld.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
