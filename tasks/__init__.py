"""arborl.tasks: what the environments are asked to do, one folder per benchmark, and suites of it.

    spec.py        the task types (plain, validated data)
    suites.py      the suite registry; each benchmark folder's `suites.py` registers its own
    stream.py      the training task stream
    common.py      entry points and the protocols suites share (`Policy`, `HostToolEpisode`)
    swebench/      SWE-bench: instances, harness, grading, image recipes; swe-mini, swe-real
    osworld/       OSWorld's task format, its loader and caches; desktop-mini
    web/           web tasks and MiniWoB++; web-mini, web-miniwob
    toy/           arborl's own small tool-use suites: tool-mini, tool-maze, tool-doors, tool-mix

Nothing here imports another layer of arborl: what needs a sandbox (running a verifier,
building an image) lives with the env that runs it, and takes what it needs from here.
"""

from .common import EntryPointError, HostToolEpisode, Policy, load_entry_point
from .suites import (
    Suite,
    SuiteError,
    episode_score,
    get_suite,
    is_registered,
    list_suites,
    register_suite,
    succeeded,
)
from .task_types import (
    BASE_IMAGE,
    VERIFIER_DIR,
    CodeTask,
    Document,
    Task,
    ToolDecl,
    ToolTask,
    coerce_task,
    load_corpus,
)

__all__ = [
    "BASE_IMAGE",
    "VERIFIER_DIR",
    "CodeTask",
    "Document",
    "EntryPointError",
    "HostToolEpisode",
    "Policy",
    "Suite",
    "SuiteError",
    "Task",
    "ToolDecl",
    "ToolTask",
    "coerce_task",
    "episode_score",
    "get_suite",
    "is_registered",
    "list_suites",
    "load_corpus",
    "load_entry_point",
    "register_suite",
    "succeeded",
]
