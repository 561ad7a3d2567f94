"""`desktop-mini`: nine OSWorld-format tasks on the desktop image's own apps (text editor,
file manager, terminal, spreadsheet) and one infeasible, each with a gold script."""

from __future__ import annotations

from pathlib import Path

from ..task_types import Task
from .loader import GOLD_FILE, load_osworld_dir
from .policies import ScriptedDesktopPolicy, gold_steps
from .task import DesktopTask

DESKTOP_MINI = Path(__file__).with_name("data") / "desktop-mini"


def load_desktop_mini() -> list[DesktopTask]:
    """The `desktop-mini` suite (OSWorld's format checked; the desktop env checks the rest)."""
    return load_osworld_dir(DESKTOP_MINI)


def desktop_mini_gold(task: Task) -> ScriptedDesktopPolicy:
    """The scripted solution of a desktop-mini task (a fresh policy per episode)."""
    return ScriptedDesktopPolicy(gold_steps(DESKTOP_MINI / GOLD_FILE, task.id))
