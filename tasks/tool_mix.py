"""`tool-mix`: tool-mini's questions and houses of doors in one suite, for RL to add to a warm start.

The houses here are tool-doors' with one difference: red doors always lead on, and nothing
says so. The warm start demonstrates both halves, but not the same way: tool-mini's
questions by their gold solution, houses by a walker that picks colours at random
(`tool_doors.explore_policy`) on houses whose leading colour is drawn per house
(`lead="any"` in the demonstrations' stream, e.g. `+sft.train_options.lead=any`: on red
houses alone every recovery from a dead end is red, and the walker's demonstrations would
teach red two picks to one). So the demonstrations teach the tools, the format and copying
an answer out of a tool result, and leave one thing to reinforcement learning: which door
leads on here, which only the reward shows. This is the shape of ReTool's and
rStar2-Agent's recipes (a small cold start for the format, RL for the rest). From a warm
start that already copied answers, 20 GRPO steps took held-out success from 30 % to 75 %,
the same minutes of more warm start to 32 %; the main job's model trained on this suite from
scratch did not learn to copy within the main job's 28 minutes (docs/trainer.md, learning
benchmark, 2026-11-27).

- `load_suite()`: tool-mini's first 64 evaluation questions and 64 red-leading houses
  (`tool_doors.load_suite("red")`), alternating (so a prefix of any even length holds both
  halves equally).
- `generate_mix_tasks(n, seed, doors=0.25, lead="red", **options)`: the training stream, a
  `doors` share of houses, the rest tool-mini's counterfactual stream under `options`.
- `demo_policy`: the warm start's demonstrator; `gold_policy`, `empty_policy`.
"""

from __future__ import annotations

import random
from typing import Any

from . import tool_doors, tool_mini
from .spec import ToolTask
from .suites import Policy

MINI_EVAL = 64
LEAD = "red"


def _is_house(task: ToolTask) -> bool:
    return task.metadata.get("suite") == "tool-doors"


def load_suite() -> list[ToolTask]:
    """128 tasks: tool-mini's first 64 and tool-doors' 64, alternating."""
    mini, doors = tool_mini.load_suite()[:MINI_EVAL], tool_doors.load_suite(LEAD)
    return [t for pair in zip(mini, doors, strict=True) for t in pair]


def generate_mix_tasks(
    n: int, seed: int = 0, doors: float = 0.25, lead: str = LEAD, **options: Any
) -> list[ToolTask]:
    """`n` training tasks, reproducible by `seed`: round(`doors` * n) red-leading houses
    and the rest of `tool_mini.generate_counterfactual_tasks(..., **options)`, in a seeded
    order. Neither part holds an evaluation task of its suite. The demonstrations' stream
    should take `lead="any"` (a colour per house, unsaid): on red houses alone every walk
    the walker finishes recovers through red doors, and that already teaches red."""
    if not 0.0 <= doors <= 1.0:
        raise ValueError(f"doors is a fraction in [0, 1], got {doors}")
    n_doors = round(doors * n)
    tasks = tool_doors.generate_door_tasks(n_doors, seed, lead) + tool_mini.generate_counterfactual_tasks(
        n - n_doors, seed, **options
    )
    random.Random(f"tool-mix:{seed}").shuffle(tasks)
    return tasks


def demo_policy(task: ToolTask) -> Policy:
    """The warm start's demonstrator: tool-mini's gold, a random walker in the houses."""
    return tool_doors.explore_policy(task) if _is_house(task) else tool_mini.gold_policy(task)


def gold_policy(task: ToolTask) -> Policy:
    return tool_doors.gold_policy(task) if _is_house(task) else tool_mini.gold_policy(task)


def empty_policy(task: ToolTask) -> Policy:
    return tool_doors.empty_policy(task) if _is_house(task) else tool_mini.empty_policy(task)
