"""ScienceWorld benchmark: env steps per second against the package's own stepping loop, and
an episode's reset in a pooled JVM against starting a new one.

1. Steps/s: the gold action sequences of a few tasks, stepped (a) by the package's own loop,
   `scienceworld.ScienceWorldEnv.step` (which reads look, inventory, task description and
   every valid action into its info each step), (b) through arborl/ScienceWorld-v0 (sync
   `env.step`: observation, score, completion; state hash on). The env makes the package's
   reads too, in one trip to the JVM (listing the valid actions moves the world's random
   events, `arborl.tasks.scienceworld.simulator.reads_after_step`), and copies the valid
   actions over only in (c), `show_valid_actions=True`. Same JVM kind, same actions, same run;
   reported as ratios over (a).
2. Reset: `env.reset` of a task in a JVM taken from the pool (load + first look) against
   starting a fresh simulator (`ScienceWorldEnv()`, a new JVM) and loading it.
3. The JVM options: the package's own loop in a JVM started with arborl's `JVM_OPTIONS`
   (the constant identity hash and the heap cap, `arborl.tasks.scienceworld.simulator`) against one started as the
   package starts it, the same actions, rounds interleaved so that a change in the machine's
   load falls on both.

Writes bench/results/scienceworld.md (and .json).

    python bench/bench_scienceworld.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from arborl.envs.scienceworld import JVMPool, ScienceWorldEnv
from arborl.envs.scienceworld.jvm import start_game, stop_game
from arborl.tasks.scienceworld.gold import gold_actions
from arborl.tasks.scienceworld.simulator import JVM_OPTIONS
from arborl.tasks.scienceworld.task import make_task
from arborl.tasks.scienceworld.variations import variations

RESULTS = Path(__file__).with_name("results")
TASKS = ("find-living-thing", "boil", "chemistry-mix")


def package_loop(game: Any, task: Any, actions: tuple[str, ...]) -> tuple[float, int]:
    game.load(task.task_name, task.variation, "")
    game.reset()
    start = time.perf_counter()
    for a in actions:
        _, _, done, info = game.step(a)
    assert done, "the game did not end on its gold sequence"
    return time.perf_counter() - start, int(info["score"])


def until_done(game: Any, task: Any, actions: tuple[str, ...]) -> tuple[str, ...]:
    """The gold sequence up to the action that ends the game (a gold path may run on past it)."""
    game.load(task.task_name, task.variation, "")
    game.reset()
    for n, a in enumerate(actions, 1):
        if game.step(a)[2]:
            return actions[:n]
    raise AssertionError(f"{task.id}: the gold sequence does not end the game")


def env_loop(env: ScienceWorldEnv, task: Any, actions: tuple[str, ...]) -> tuple[float, int]:
    env.reset(options={"task": task})
    start = time.perf_counter()
    for a in actions:
        info = env.step(a)[4]
    elapsed = time.perf_counter() - start
    env.close()
    return elapsed, int(info["score"])


def steps(rounds: int) -> list[dict[str, Any]]:
    pool = JVMPool(1)
    game = start_game()
    rows = []
    try:
        plain, valid = ScienceWorldEnv(jvm_pool=pool), ScienceWorldEnv(jvm_pool=pool, show_valid_actions=True)
        warm = make_task(TASKS[0], variations()[TASKS[0]]["test"][1], "test")
        warm_actions = until_done(game, warm, gold_actions(warm))
        for loop in (
            lambda: package_loop(game, warm, warm_actions),
            lambda: env_loop(valid, warm, warm_actions),
        ):
            loop()  # both JVMs' JIT warmed up on another variation before anything is timed
        for name in TASKS:
            task = make_task(name, variations()[name]["test"][0], "test")
            actions = until_done(game, task, gold_actions(task))
            times: dict[str, float] = {"package": 0.0, "env": 0.0, "env+valid": 0.0}
            for _ in range(rounds):
                for key, (elapsed, score) in (
                    ("package", package_loop(game, task, actions)),
                    ("env", env_loop(plain, task, actions)),
                    ("env+valid", env_loop(valid, task, actions)),
                ):
                    assert score == 100, (key, name, score)
                    times[key] += elapsed
            n = len(actions) * rounds
            rows.append({"task": name, "steps": n, **{k: n / v for k, v in times.items()}})
    finally:
        stop_game(game)
        pool.close()
    return rows


def resets(rounds: int) -> dict[str, float]:
    task = make_task("boil", variations()["boil"]["test"][0], "test")
    pool = JVMPool(1)
    env = ScienceWorldEnv(jvm_pool=pool)
    env.reset(options={"task": task})  # the pool's JVM is started (and warm) before timing
    reset_s, new_s = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        env.reset(options={"task": task})
        reset_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        game = start_game()
        game.load(task.task_name, task.variation, "")
        game.reset()
        new_s.append(time.perf_counter() - t)
        stop_game(game)
    env.close()
    pool.close()
    return {"reset_s": sum(reset_s) / rounds, "new_jvm_s": sum(new_s) / rounds}


def timed_actions(game: Any, task: Any, actions: tuple[str, ...]) -> float:
    """Seconds for the package's `step` over `actions`. Without the option a world may differ
    from the one the gold path was drawn in, so the path need not end the game here: the same
    actions are timed either way."""
    game.load(task.task_name, task.variation, "")
    game.reset()
    start = time.perf_counter()
    for a in actions:
        game.step(a)
    return time.perf_counter() - start


def jvm_option(rounds: int) -> dict[str, Any]:
    from scienceworld import ScienceWorldEnv

    assert "hashCode" not in os.environ.get("JDK_JAVA_OPTIONS", ""), "the plain JVM must start without it"
    option, plain = start_game(), ScienceWorldEnv("")
    times = {"option": 0.0, "plain": 0.0}
    n = 0
    try:
        tasks = [make_task(name, variations()[name]["test"][0], "test") for name in TASKS]
        paths = [until_done(option, task, gold_actions(task)) for task in tasks]
        for task, actions in zip(tasks, paths, strict=True):  # JIT warm-up in both before anything is timed
            timed_actions(option, task, actions)
            timed_actions(plain, task, actions)
        for r in range(rounds):
            for task, actions in zip(tasks, paths, strict=True):
                order = (
                    (("option", option), ("plain", plain))
                    if r % 2 == 0
                    else (("plain", plain), ("option", option))
                )
                for key, game in order:
                    times[key] += timed_actions(game, task, actions)
                n += len(actions)
    finally:
        stop_game(option)
        stop_game(plain)
    return {
        "options": JVM_OPTIONS,
        "steps": n,
        "option_s_per_step": times["option"] / n,
        "plain_s_per_step": times["plain"] / n,
    }


def write(rows: list[dict[str, Any]], reset: dict[str, float], option: dict[str, Any], rounds: int) -> Path:
    load = os.getloadavg()[0]
    lines = [
        "# ScienceWorld benchmark",
        "",
        f"`python bench/bench_scienceworld.py` on {platform.node()} ({os.cpu_count()} cores), "
        f"{time.strftime('%Y-%m-%d')}; 1-min load average {load:.1f} (others share the machine). "
        "Ratios are measured in the same run; absolute numbers are for orientation only.",
        "",
        f"## Steps per second: the gold sequences, {rounds} round(s) each",
        "",
        "| task | steps | package `step` /s | env /s | env + valid actions /s | env / package | env+valid / package |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['steps']} | {r['package']:.1f} | {r['env']:.1f} | {r['env+valid']:.1f} "
            f"| {r['env'] / r['package']:.2f}x | {r['env+valid'] / r['package']:.2f}x |"
        )
    lines += [
        "",
        "## Reset in a pooled JVM vs a new JVM (task `boil`)",
        "",
        "| pooled `env.reset` s | new JVM + load + reset s | new / pooled |",
        "|---:|---:|---:|",
        f"| {reset['reset_s']:.2f} | {reset['new_jvm_s']:.2f} | {reset['new_jvm_s'] / reset['reset_s']:.1f}x |",
        "",
        f"## The JVM option: the package's loop with `{option['options']}` against without",
        "",
        f"{option['steps']} steps each (the gold sequences of {', '.join(TASKS)}), rounds interleaved.",
        "",
        "| with the option ms/step | without ms/step | with / without |",
        "|---:|---:|---:|",
        f"| {1e3 * option['option_s_per_step']:.1f} | {1e3 * option['plain_s_per_step']:.1f} "
        f"| {option['option_s_per_step'] / option['plain_s_per_step']:.2f}x |",
        "",
    ]
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "scienceworld.md"
    out.write_text("\n".join(lines))
    (RESULTS / "scienceworld.json").write_text(
        json.dumps({"steps": rows, "reset": reset, "jvm_option": option}, indent=1)
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one round each")
    rounds = 1 if ap.parse_args().quick else 5
    out = write(steps(rounds), resets(rounds), jvm_option(rounds), rounds)
    print(out.read_text())


if __name__ == "__main__":
    main()
