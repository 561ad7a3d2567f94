"""ScienceWorld tasks: one (task type, variation) of the simulator, and the suites' loaders.

A task type is one of the package's 30 (`boil`, `find-living-thing`, ...; its `tasks.json`
names them with their topic and the paper's id, e.g. 1-1 Matter / Changes of State
(Boiling)). A variation is an index the simulator turns into a world (which substance, which
room, ...); the package splits each type's variations into train, dev and test
(`variations.py`). Simplifications are the package's own comma-separated flags
(`teleportAction`, `openDoors`, ..., or `easy`); the suites run without any, as the paper's
test results do.
"""

from __future__ import annotations

from functools import cache, partial
from typing import Any, Literal

from pydantic import Field, model_validator

from ..task_types import Task
from .variations import Split, variations

#: The package's default step limit (`ScienceWorldEnv(envStepLimit=100)`).
DEFAULT_STEP_LIMIT = 100
#: How many of each type's test variations a `scienceworld-<task>` suite runs (the first ones).
SUITE_VARIATIONS = 3


class ScienceWorldTask(Task):
    """One ScienceWorld world: a task type, a variation, optional simplifications."""

    kind: Literal["scienceworld"] = "scienceworld"
    task_name: str = Field(min_length=1, description="the package's task name, e.g. `boil`")
    variation: int = Field(ge=0, description="the variation index (the package's `variationIdx`)")
    split: Split | None = Field(None, description="the package's split the variation belongs to")
    simplifications: str = Field("", description="the package's simplification string, e.g. `easy`")
    step_limit: int = Field(DEFAULT_STEP_LIMIT, gt=0, description="the package's `envStepLimit`")

    @model_validator(mode="after")
    def _known(self) -> ScienceWorldTask:
        known = variations()
        if self.task_name not in known:
            raise ValueError(
                f"unknown ScienceWorld task {self.task_name!r}; known: {', '.join(sorted(known))}"
            )
        top = known[self.task_name]["max_variations"]
        if self.variation >= top:
            raise ValueError(f"{self.task_name} has variations 0..{top - 1}, not {self.variation}")
        return self


@cache
def task_types() -> dict[str, dict[str, str]]:
    """task name → {"id", "topic", "title"}, from the package's tasks.json (no JVM)."""
    from scienceworld.constants import TASKS
    from scienceworld.utils import infer_task

    return {
        infer_task(t["task_name"]): {"id": t["task_id"], "topic": t["topic"], "title": t["task"]}
        for t in TASKS
    }


def gold_budget(gold: int) -> int:
    """The limit a gold path of `gold` moves (or actions) gets: the package's 100, or a quarter
    more where that is more. The room is the agent's (a gold path is one way through, not the
    shortest) and covers the train variations whose action counts were measured in the worlds
    before `simulator`'s fix, when a variation's gold path was a few actions longer or shorter
    at each load (mendelian-genetics-known-plant train 3: 143 actions then, 146 now)."""
    return max(DEFAULT_STEP_LIMIT, -(-gold * 5 // 4))


def task_names() -> list[str]:
    """The 30 task types, by the names the simulator loads them by."""
    return sorted(variations())


Length = Literal["gold_moves", "gold_steps"]


@cache
def longest_gold_budget(length: Length = "gold_steps") -> int:
    """The budget of the longest gold path in the snapshot (of any split), in actions or in
    moves: what a variation whose own gold path was never measured gets. Gold lengths differ
    between the variations of one type by up to seven times (inclined-plane-friction-named-
    surfaces: at most 115 actions in its test variations, 797 in its train ones), so neither a
    type's own longest nor the test split's longest is enough."""
    return max(gold_budget(n) for info in variations().values() for n in info.get(length, {}).values())


def step_limit(task_name: str) -> int:
    """The step limit of every variation of a type (the package's `envStepLimit`, which
    bounds the simulator's moves): `gold_budget` of the longest gold path measured for the
    type, in moves or in actions (`wait` is 11 moves, `look around` none). Per type, not per
    variation: most train variations' action counts were measured while a variation's world,
    and so its gold path, still changed from load to load (mendelian-genetics-unknown-plant 361:
    160 and 261 actions in two loads; `simulator`), and moves are measured only for the types
    whose gold paths wait (for the others an action is at most one move, so the action count
    bounds the moves)."""
    info = variations()[task_name]
    lengths = [*info.get("gold_moves", {}).values(), *info.get("gold_steps", {}).values()]
    return gold_budget(max(lengths)) if lengths else longest_gold_budget("gold_moves")


def turn_budget(task_name: str, variation: int) -> int:
    """The agent's turns the variation needs: `gold_budget` of its gold path's actions (one a
    turn); `longest_gold_budget()` where that is not in the snapshot."""
    measured = variations()[task_name].get("gold_steps", {}).get(str(variation))
    return gold_budget(measured) if measured is not None else longest_gold_budget()


def split_budget(
    split: Split = "test", limit: int | None = SUITE_VARIATIONS, names: list[str] | None = None
) -> int:
    """The most turns a task of `load_all(split, limit)` needs (of the types in `names` only,
    when given): a suite's turn budget. It reads only those variations, so measuring another
    split's gold lengths leaves a suite's budget as it was."""
    return max(
        turn_budget(name, v) for name in names or task_names() for v in variations()[name][split][:limit]
    )


def make_task(task_name: str, variation: int, split: Split | None = None) -> ScienceWorldTask:
    """The task of one variation, with its `step_limit`."""
    return ScienceWorldTask(
        id=f"scienceworld/{task_name}/{variation}",
        task_name=task_name,
        variation=variation,
        split=split,
        step_limit=step_limit(task_name),
        metadata={"suite": f"scienceworld-{task_name}", **task_types().get(task_name, {})},
    )


def load_task_type(
    task_name: str, split: Split = "test", limit: int | None = SUITE_VARIATIONS
) -> list[ScienceWorldTask]:
    """The first `limit` variations of `split` of one task type (None: all of them)."""
    chosen = variations()[task_name][split]
    return [make_task(task_name, v, split) for v in chosen[:limit]]


def load_all(split: Split = "test", limit: int | None = SUITE_VARIATIONS) -> list[ScienceWorldTask]:
    """`load_task_type` over every task type."""
    return [t for name in task_names() for t in load_task_type(name, split, limit)]


def load_train() -> list[ScienceWorldTask]:
    """Every train variation of every task type (the package's train split)."""
    return load_all("train", None)


def __getattr__(name: str) -> Any:
    """`load_<task name>`: the loader of suite `scienceworld-<task name>`, so each suite can
    name its loader as a ``"module:function"`` string (listing suites imports nothing)."""
    task_name = name.removeprefix("load_")
    if name.startswith("load_") and task_name in variations():
        return partial(load_task_type, task_name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
