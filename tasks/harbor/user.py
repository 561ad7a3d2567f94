"""A folder of Harbor / Terminal-Bench task folders as a suite (`arborl eval suite=FOLDER`)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ..suites import Suite
from .reader import load_tasks


def harbor_suite(name: str, path: Path) -> Suite:
    """The suite of the Harbor tasks at `path` (one task folder, or a folder holding them)."""
    return Suite(
        name,
        "arborl/Harbor-v0",
        partial(load_tasks, path),
        description=f"Harbor tasks from {path}",
        gold="arborl.tasks.harbor.policies:gold_policy",
        empty="arborl.tasks.harbor.policies:empty_policy",
        max_turns=30,
        tags=("harbor", "terminal", "user"),
    )
