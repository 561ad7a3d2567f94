"""The TextWorld suites, one per `tw-make` challenge, with fixed settings and seeds
(`arborl.tasks.suites` imports this module to register them)."""

from __future__ import annotations

import random
from typing import Any

from ..suites import Suite, register_suite
from .games import TextWorldTask

#: Games per suite: seeds 0..N-1.
GAMES = 8
#: suite name → (challenge, its tw-make arguments, turn budget, what it asks).
SUITES: dict[str, tuple[str, tuple[str, ...], int, str]] = {
    "textworld-coin": ("tw-coin_collector", ("--level", "5"), 25, "find the coin, 5 rooms away"),
    "textworld-treasure": (
        "tw-treasure_hunter",
        ("--level", "5"),
        30,
        "find the named object in a house of locked doors and containers",
    ),
    "textworld-cooking": (
        "tw-cooking",
        ("--recipe", "1", "--take", "1", "--go", "6", "--open", "--cook", "--cut"),
        50,
        "read the recipe, gather, cut and cook the ingredient, prepare and eat the meal (First TextWorld Problems)",
    ),
    "textworld-simple": (
        "tw-simple",
        ("--rewards", "dense", "--goal", "detailed"),
        40,
        "unlock a door, fetch food from the fridge, put it on the stove (dense rewards, detailed goal)",
    ),
}


def load(name: str) -> list[TextWorldTask]:
    challenge, args, _, _ = SUITES[name]
    short = name.removeprefix("textworld-")
    return [
        TextWorldTask(
            id=f"{short}-{seed}",
            challenge=challenge,
            args=args,
            seed=seed,
            metadata={"suite": name},
        )
        for seed in range(GAMES)
    ]


def train_tasks(
    n: int, seed: int = 0, suite: str = "textworld-coin", games: int = 64, first_seed: int = 1000
) -> list[TextWorldTask]:
    """`n` training tasks for `arborl train tasks.train=arborl.tasks.textworld.suites:train_tasks`:
    the suite's challenge and settings on `games` seeds from `first_seed` (by default disjoint
    from the suites' seeds 0..GAMES-1, which stay held out), cycled, shuffled by `seed`. Each new
    seed is a new game to generate (seconds each, once)."""
    challenge, args, _, _ = SUITES[suite]
    short = suite.removeprefix("textworld-")
    order = random.Random(seed).sample(range(first_seed, first_seed + games), games)
    return [
        TextWorldTask(
            id=f"{short}-{s}",
            challenge=challenge,
            args=args,
            seed=s,
            metadata={"suite": suite},
        )
        for s in (order[i % games] for i in range(n))
    ]


def load_coin() -> list[TextWorldTask]:
    return load("textworld-coin")


def load_treasure() -> list[TextWorldTask]:
    return load("textworld-treasure")


def load_cooking() -> list[TextWorldTask]:
    return load("textworld-cooking")


def load_simple() -> list[TextWorldTask]:
    return load("textworld-simple")


def _how(name: str) -> dict[str, Any]:
    """Everything of a suite but its name: the env, loader, policies, budget."""
    challenge, args, turns, what = SUITES[name]
    return {
        "env_id": "arborl/TextWorld-v0",
        "loader": f"arborl.tasks.textworld.suites:load_{name.removeprefix('textworld-')}",
        "description": f"TextWorld {challenge} {' '.join(args)}, seeds 0-{GAMES - 1}: {what}",
        "gold": "arborl.tasks.textworld.policies:gold_policy",
        "empty": "arborl.tasks.textworld.policies:empty_policy",
        "max_turns": turns,
        "tags": ("textworld",),
    }


register_suite(Suite("textworld-coin", **_how("textworld-coin")))
register_suite(Suite("textworld-treasure", **_how("textworld-treasure")))
register_suite(Suite("textworld-cooking", **_how("textworld-cooking")))
register_suite(Suite("textworld-simple", **_how("textworld-simple")))
