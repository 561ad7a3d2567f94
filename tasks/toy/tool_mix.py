"""`tool-mix`: tool-mini's questions and houses of doors in one suite, for RL to add to a warm start.

The houses here are tool-doors' with one difference: blue doors always lead on, and nothing
says so. The warm start demonstrates both halves, but not the same way: tool-mini's
questions by their gold solution, houses by a walker with a habit (`demo_policy`): in every
room it tries the red door, which each room names first, two times in three, and takes the
other door after a dead end. Its houses lead through a colour drawn per house
(`lead="any"` in the demonstrations' stream: the main job's `sft.train_options`), so the
demonstrations teach the tools, the format, copying an answer out of a tool result and
getting back from a dead end, and leave one thing to reinforcement learning: that here blue
leads on, which only the reward shows. A policy that learned the walker's habit tries red
first in most rooms, so its greedy walk rarely gets through a blue house (the budget
tolerates one dead end), and more demonstrations only teach the habit better; its samples
still go blue often enough for GRPO's groups to differ. This is the shape of ReTool's and
rStar2-Agent's recipes (a small cold start for the format, RL for the rest), and the
default `arborl train` trains on it (docs/results/main-job-tool-mix.md).

Why a habit: a walker that picks either colour at random leaves the warm-started policy
without a preference, so its greedy walk takes whichever colour rounding favours in every
house, and the houses' held-out success flips between 0 and 100 % by chance
(docs/results/main-job-tool-mix.md).

- `load_suite()`: tool-mini's first 64 evaluation questions and 64 blue-leading houses
  (`tool_doors.load_suite("blue")`), alternating (so a prefix of any even length holds both
  halves equally).
- `generate_mix_tasks(n, seed, doors=0.5, lead="blue", **options)`: the training stream, a
  `doors` share of houses, the rest tool-mini's counterfactual stream under `options`.
- `load_houses()`: the houses alone (`tool-mix-houses`); `generate_mix_tasks(n, doors=1.0)`
  is their training stream.
- `demo_policy`: the warm start's demonstrator; `gold_policy`, `empty_policy`.
"""

from __future__ import annotations

import random
from typing import Any

from ..common import Policy
from ..task_types import ToolTask
from . import tool_doors, tool_mini

MINI_EVAL = 64
LEAD = "blue"
HABIT = 2 / 3  # how often the demonstrator tries the red door first


def _is_house(task: ToolTask) -> bool:
    return task.metadata.get("suite") == "tool-doors"


def load_suite() -> list[ToolTask]:
    """128 tasks: tool-mini's first 64 and tool-doors' 64 blue houses, alternating."""
    mini, doors = tool_mini.load_suite()[:MINI_EVAL], tool_doors.load_suite(LEAD)
    return [t for pair in zip(mini, doors, strict=True) for t in pair]


def load_houses() -> list[ToolTask]:
    """The suite's 64 houses alone (`tool-mix-houses`, the learning benchmark's suite)."""
    return tool_doors.load_suite(LEAD)


def generate_mix_tasks(
    n: int, seed: int = 0, doors: float = 0.5, lead: str = LEAD, **options: Any
) -> list[ToolTask]:
    """`n` training tasks, reproducible by `seed`: round(`doors` * n) houses where `lead`
    leads on (blue, unsaid) and the rest of
    `tool_mini.generate_counterfactual_tasks(..., **options)`, in a seeded order. Neither part
    holds an evaluation task of its suite. The demonstrations' stream should take
    `lead="any"` (a colour per house, unsaid): on blue houses alone every dead end the walker
    gets back from would be followed by a blue door, and that already teaches blue."""
    if not 0.0 <= doors <= 1.0:
        raise ValueError(f"doors is a fraction in [0, 1], got {doors}")
    n_doors = round(doors * n)
    tasks = tool_doors.generate_door_tasks(n_doors, seed, lead) + tool_mini.generate_counterfactual_tasks(
        n - n_doors, seed, **options
    )
    random.Random(f"tool-mix:{seed}").shuffle(tasks)
    return tasks


def demo_policy(task: ToolTask) -> Policy:
    """The warm start's demonstrator: tool-mini's gold; in the houses a walker that tries the
    red door first `HABIT` of the time."""
    return tool_doors.explore_policy(task, red=HABIT) if _is_house(task) else tool_mini.gold_policy(task)


def gold_policy(task: ToolTask) -> Policy:
    return tool_doors.gold_policy(task) if _is_house(task) else tool_mini.gold_policy(task)


def empty_policy(task: ToolTask) -> Policy:
    return tool_doors.empty_policy(task) if _is_house(task) else tool_mini.empty_policy(task)
