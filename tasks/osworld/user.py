"""A user's OSWorld task files as a suite (`arborl eval suite=FOLDER_OR_FILE`)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ..suites import Suite, SuiteError
from ..task_types import Task
from .loader import GOLD_FILE, load_osworld_dir, load_osworld_task
from .policies import ScriptedDesktopPolicy, gold_steps
from .task import DesktopSupport


def load_tasks(path: Path, support: DesktopSupport | None) -> list[Task]:
    """The tasks of a folder (searched recursively) or of one file."""
    if path.is_dir():
        return list(load_osworld_dir(path, support=support))
    return [load_osworld_task(path, support=support)]


def gold_policy(gold_file: Path, task: Task) -> ScriptedDesktopPolicy:
    try:
        return ScriptedDesktopPolicy(gold_steps(gold_file, task.id))
    except KeyError:
        raise SuiteError(f"{gold_file} has no scripted solution for {task.id!r}") from None


def osworld_suite(name: str, path: Path, support: DesktopSupport | None = None) -> Suite:
    """The suite of OSWorld task files at `path`; a `gold.json` beside them gives its gold
    policy. `support`: the desktop's, to refuse at load what it cannot run."""
    root = path if path.is_dir() else path.parent
    gold_file = root / GOLD_FILE
    return Suite(
        name,
        "arborl/Desktop-v0",
        partial(load_tasks, path, support),
        description=f"OSWorld tasks from {path}",
        env_kwargs={"screen_width": 1920, "screen_height": 1080},  # OSWorld's screen
        gold=partial(gold_policy, gold_file) if gold_file.is_file() else None,
        empty="arborl.tasks.osworld.policies:empty_policy",
        max_turns=15,
        tags=("desktop", "osworld", "user"),
    )
