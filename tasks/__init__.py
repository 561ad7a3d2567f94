"""arborl.tasks: what the environments are asked to do (plain data, no behaviour), and suites of it."""

from .entry_points import EntryPointError, load_entry_point
from .spec import (
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
from .suites import (
    SUITES,
    Policy,
    Suite,
    SuiteError,
    get_suite,
    list_suites,
    register_builtin_suites,
    register_suite,
)

register_builtin_suites()

__all__ = [
    "BASE_IMAGE",
    "SUITES",
    "VERIFIER_DIR",
    "CodeTask",
    "Document",
    "EntryPointError",
    "Policy",
    "Suite",
    "SuiteError",
    "Task",
    "ToolDecl",
    "ToolTask",
    "coerce_task",
    "get_suite",
    "list_suites",
    "load_corpus",
    "load_entry_point",
    "register_suite",
]
