"""The package's own train/dev/test variation lists of every task type.

The lists live in the simulator (`ScienceWorldEnv.get_variations_train/dev/test` after a
`load`), so reading them costs a JVM start and a load per task type (about a minute for all
30). Listing or loading a suite should not start a JVM, so the lists are kept as a snapshot,
`data/variations.json`, written by this module from the installed package:

    python -m arborl.tasks.scienceworld.variations          # rewrite data/variations.json
    python -m arborl.tasks.scienceworld.variations --gold train   # add the train variations' gold lengths

Gold paths set each variation's limits (`task.make_task`): its step limit from the moves the
path takes (the simulator's count, which `envStepLimit` bounds: `wait` is 11 moves), the
agent's turns from its actions. The suites' test variations are measured when the snapshot is
written; `--gold SPLIT` adds a whole split's (hours of JVM for the 3592 train variations: 0.3-15
s to make a gold path, then its replay). It keeps what it has measured every few variations,
so a run that is stopped goes on where it was when started again.

The snapshot records the package version it was read from; `variations()` refuses a
snapshot of another version (rerun the command above after changing the pin), and
tests/tasks/scienceworld checks it against the package's own lists.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
from functools import cache
from pathlib import Path
from typing import Any, Literal

from . import simulator

SNAPSHOT = Path(__file__).resolve().parent / "data" / "variations.json"
Split = Literal["train", "dev", "test"]
SPLITS: tuple[Split, ...] = ("train", "dev", "test")
#: `measure_gold` writes what it has measured after this many variations.
SAVE_EVERY = 10


class VariationsError(RuntimeError):
    """The variation snapshot is missing or from another scienceworld version (the message says how to fix it)."""


def package_version() -> str:
    try:
        return importlib.metadata.version("scienceworld")
    except importlib.metadata.PackageNotFoundError:
        raise VariationsError(
            "the `scienceworld` package is not installed: run scripts/setup.sh "
            "(or `pip install scienceworld==1.2.3`, and a Java runtime: apt-get install default-jre-headless)"
        ) from None


@cache
def variations() -> dict[str, dict[str, Any]]:
    """task name → {"max_variations": int, "train": [...], "dev": [...], "test": [...],
    "gold_steps": {variation: actions of its gold path}, "gold_moves": {variation: the
    simulator's moves that path takes}} (the gold lengths for the measured variations)."""
    data = json.loads(SNAPSHOT.read_text())
    if data["scienceworld"] != package_version():
        raise VariationsError(
            f"{SNAPSHOT} was read from scienceworld {data['scienceworld']}, but {package_version()} is "
            "installed: run `python -m arborl.tasks.scienceworld.variations` to rewrite it"
        )
    return dict(data["tasks"])


def read_from_package(suite_variations: int = 3, names: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """The lists as the simulator gives them (starts a JVM; minutes for all 30 types), with the
    gold paths' lengths of the first `suite_variations` test variations of each type; only
    the types in `names` when given."""
    game = simulator.start()
    try:
        out: dict[str, dict[str, Any]] = {}
        for name in names if names is not None else game.get_task_names():
            game.load(name, 0, "")
            out[name] = {
                "max_variations": int(game.get_max_variations(name)),
                "train": [int(v) for v in game.get_variations_train()],
                "dev": [int(v) for v in game.get_variations_dev()],
                "test": [int(v) for v in game.get_variations_test()],
            }
            steps, moves = _gold_lengths(game, name, out[name]["test"][:suite_variations])
            out[name]["gold_steps"], out[name]["gold_moves"] = steps, moves
        return out
    finally:
        game.close()


def _gold_lengths(game: Any, name: str, chosen: list[int]) -> tuple[dict[str, int], dict[str, int]]:
    """variation → the number of actions of its gold path (an agent's turns), and variation →
    the simulator's move count once that path has done the task (what the step limit bounds:
    `wait` is 11 moves, `look around` none; the package ends an episode whose moves pass
    `envStepLimit`)."""
    steps, moves = {}, {}
    for v in chosen:
        game.load(name, v, "", generateGoldPath=True)
        path = [str(a) for a in game.get_gold_action_sequence()]
        steps[str(v)] = len(path)
        moves[str(v)] = _moves(game, name, v, path)
    return steps, moves


def _moves(game: Any, name: str, variation: int, path: list[str]) -> int:
    """The move count when `path` completes the task in a fresh world (loaded and stepped as
    the env and the package step one: the first `look around`, and every step's reads, which
    move the world's random events: `simulator.reads_after_step`), or after its last action.
    Through the server directly: the package's `step` stops at its own `envStepLimit`."""
    server = game.server
    game.load(name, variation, "")
    server.reset()
    for action in ["look around", *path]:
        server.step(action)
        simulator.reads_after_step(server)
        if server.getCompleted():
            break
    return int(server.getNumMoves())


def measure_gold(split: Split, path: Path = SNAPSHOT, names: list[str] | None = None) -> None:
    """Add the gold paths' lengths of every `split` variation (of the types in `names`, else
    all) to the snapshot at `path`, writing it after every `SAVE_EVERY` variations; variations
    already measured (with moves) are skipped, and a length already there from an earlier
    draw is kept where it is the longer."""
    data = json.loads(path.read_text())
    game = simulator.start()
    try:
        for name in names if names is not None else sorted(data["tasks"]):
            info = data["tasks"][name]
            todo = [v for v in info[split] if str(v) not in info.get("gold_moves", {})]
            # In parts: one mendelian-genetics gold path takes 30 s or more to make here, so
            # a type of 240 variations is two hours, too long to lose to a stop.
            for start in range(0, len(todo), SAVE_EVERY):
                steps, moves = _gold_lengths(game, name, todo[start : start + SAVE_EVERY])
                for key, got in (("gold_steps", steps), ("gold_moves", moves)):
                    # The longer of the draws measured: before worlds were made the same in
                    # every load (`simulator`), each load drew a new gold path (grow-fruit train
                    # 11: 115 actions in one, 101 in the next), and the action counts of the
                    # types without moves were measured then and stay in the snapshot; the
                    # limits must not shrink below the longest seen. (To replace a length,
                    # remove it from the snapshot first; a fixed world's path is the same at
                    # every load.)
                    merged = dict(info.get(key, {}))
                    for v, n in got.items():
                        merged[v] = max(n, merged.get(v, 0))
                    info[key] = dict(sorted(merged.items(), key=lambda kv: int(kv[0])))
                path.write_text(json.dumps(data, indent=1) + "\n")
    finally:
        game.close()


def write_snapshot(path: Path = SNAPSHOT) -> None:
    data = {"scienceworld": package_version(), "tasks": read_from_package()}
    path.write_text(json.dumps(data, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=SNAPSHOT)
    parser.add_argument(
        "--gold", choices=SPLITS, help="add this split's gold lengths to the snapshot at --out"
    )
    parser.add_argument("--types", nargs="*", help="with --gold: only these task types")
    args = parser.parse_args(argv)
    if args.gold:
        measure_gold(args.gold, args.out, args.types)
    else:
        write_snapshot(args.out)


if __name__ == "__main__":
    main()
