"""The training task stream: index → task, the same task for the same index run after run.

    task_at = task_stream("arborl.tasks.toy.tool_mini:generate_tool_tasks", size=20000, seed=0)
    task_at(12345)        # a resumed run dispatches exactly the tasks it would have

The trainer dispatches task indices (`arborl.trainer.local.rollout`); checkpoints store the
cursor, so a resume relies on this mapping being deterministic.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from .suites import get_suite, resolve

T = TypeVar("T")


def draw_unseen(
    n: int, draw: Callable[[], T], key: Callable[[T], Hashable], held_out: Iterable[T]
) -> list[T]:
    """`n` items from `draw()`, skipping any whose `key` an item of `held_out` has: a
    generated suite's training stream, which must never hand out an evaluation task."""
    if n < 0:
        raise ValueError("n must be >= 0")
    seen = {key(item) for item in held_out}
    items: list[T] = []
    while len(items) < n:
        item = draw()
        if key(item) not in seen:
            items.append(item)
    return items


def task_stream(
    spec: str, size: int, seed: int, options: dict[str, Any] | None = None
) -> Callable[[int], Any]:
    """Index → task: ``spec`` is ``'module:function'`` (called as ``f(size, seed, **options)``)
    or ``'suite:<name>'``. The list is cycled, reshuffled each pass with a seeded RNG."""
    if spec.startswith("suite:"):
        if options:
            raise ValueError(f"options {sorted(options)} are for a generator; {spec} is a fixed suite")
        # A task that says it cannot run (a Harbor folder with a bad task.toml: `usable` is
        # False, its error logged as the suite loaded) is left out; evaluation reports it.
        tasks = [t for t in get_suite(spec.removeprefix("suite:")).tasks() if getattr(t, "usable", True)]
    else:
        tasks = list(resolve(spec)(size, seed, **(options or {})))
    if not tasks:
        raise ValueError(f"{spec} gave no tasks")
    orders: dict[int, list[int]] = {}

    def task_at(index: int) -> Any:
        epoch, pos = divmod(index, len(tasks))
        if epoch not in orders:
            order = list(range(len(tasks)))
            random.Random(seed * 1_000_003 + epoch).shuffle(order)
            orders[epoch] = order
        return tasks[orders[epoch][pos]]

    return task_at
