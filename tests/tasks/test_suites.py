"""The suite registry: lazy loading, clear errors, policies from entry points, and each
benchmark folder registering its own suites."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import arborl.tasks as tasks_pkg
from arborl.tasks import Suite, SuiteError, Task, get_suite, is_registered, register_suite, suites
from arborl.tasks.bfcl.data import AST_CATEGORIES, MULTI_TURN_CATEGORIES, RELEVANCE_CATEGORIES
from arborl.tasks.bfcl.suites import suite_name
from arborl.tasks.scienceworld import task_names as scienceworld_task_names

CALLS: list[int] = []


def load_two() -> list[Task]:
    CALLS.append(1)
    return [Task(id="a"), Task(id="b")]


def gold_for(task: Task):
    return lambda messages, info: f"solve {task.id}"


def test_a_suite_loads_lazily_once_and_resolves_entry_points():
    CALLS.clear()
    suite = register_suite(
        Suite("test-two", "arborl/Tool-v0", f"{__name__}:load_two", gold=f"{__name__}:gold_for"), force=True
    )
    assert CALLS == []
    assert [t.id for t in get_suite("test-two").tasks()] == ["a", "b"]
    suite.tasks()
    assert CALLS == [1]
    assert suite.gold_policy(suite.task("b"))([], {}) == "solve b"
    with pytest.raises(SuiteError, match="no empty policy"):
        suite.empty_policy(suite.task("a"))


def test_errors_name_what_exists():
    with pytest.raises(SuiteError, match=r"known: .*test-two"):
        register_suite(Suite("test-two", "x", load_two), force=True) and get_suite("nope")
    with pytest.raises(SuiteError, match="already registered"):
        register_suite(Suite("test-two", "y", load_two))
    with pytest.raises(SuiteError, match="cannot load"):
        Suite("broken", "x", "arborl.nowhere:load").tasks()
    with pytest.raises(SuiteError, match="duplicate task ids"):
        Suite("dups", "x", lambda: [Task(id="a"), Task(id="a")]).tasks()


ROOT = Path(__file__).resolve().parents[2]
#: The suites arborl ships, by the benchmark folder that registers them.
SHIPPED = {
    "osworld": {"desktop-mini"},
    "swebench": {"swe-mini", "swe-real"},
    "toy": {
        "tool-mini",
        "tool-maze",
        "tool-doors",
        "tool-mix",
        "tool-mix-houses",
        "tool-cues",
        "tool-cues-single",
        "tool-cues-image",
        "tool-cues-image-blank",
    },
    "web": {"web-mini", "web-miniwob", "web-miniwob-all"},
    "textworld": {"textworld-coin", "textworld-treasure", "textworld-cooking", "textworld-simple"},
}
SHIPPED["sokoban"] = {"sokoban-6x6", "sokoban-6x6-chat", "sokoban-6x6-image"}
# One suite per BFCL category and per ScienceWorld task type, registered in loops over the
# packages' own lists.
SHIPPED["bfcl"] = {"bfcl-multi-turn"} | {
    suite_name(c) for c in (*AST_CATEGORIES, *RELEVANCE_CATEGORIES, *MULTI_TURN_CATEGORIES)
}
SHIPPED["scienceworld"] = {"scienceworld", "scienceworld-train"} | {
    f"scienceworld-{n}" for n in scienceworld_task_names()
}


LOOPED = ("scienceworld", "bfcl")


def _where(ref) -> str:
    """The module an entry point names, or a loader function (or a partial of one) lives in."""
    if isinstance(ref, str):
        return ref
    return getattr(getattr(ref, "func", ref), "__module__", "") + "."


def _registered_in(path: Path) -> list[str]:
    """The names of the `Suite(...)` literals in a module."""
    calls = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)]
    return [
        c.args[0].value
        for c in calls
        if isinstance(c.func, ast.Name) and c.func.id == "Suite" and isinstance(c.args[0], ast.Constant)
    ]


def test_each_benchmark_folder_registers_its_own_suites_and_the_registry_holds_none():
    assert _registered_in(ROOT / "tasks" / "suites.py") == []
    for folder, names in SHIPPED.items():
        module = ROOT / "tasks" / folder / "suites.py"
        assert set(_registered_in(module)) <= names, module  # the names of a loop are not literals
        assert folder in LOOPED or sorted(_registered_in(module)) == sorted(names), module
        for name in names:  # what a suite loads and plays lives in its folder
            suite = get_suite(name)
            for ref in (suite.loader, suite.gold, suite.empty):
                assert ref is None or _where(ref).startswith(f"arborl.tasks.{folder}."), (name, ref)


def test_a_new_folder_is_registered_without_touching_the_registry(tmp_path, monkeypatch):
    bench = tmp_path / "test_newbench"
    bench.mkdir()
    (bench / "__init__.py").write_text("")
    (bench / "suites.py").write_text(
        "from ..suites import Suite, register_suite\n"
        "register_suite(Suite('test-newbench', 'arborl/Tool-v0', 'arborl.tasks.test_newbench.x:load'))\n"
    )
    monkeypatch.setattr(tasks_pkg, "__path__", [*tasks_pkg.__path__, str(tmp_path)])
    monkeypatch.setattr(suites, "SUITES", {})
    monkeypatch.setattr(suites, "_builtins_loaded", False)
    try:
        assert is_registered("test-newbench") and get_suite("test-newbench").env_id == "arborl/Tool-v0"
    finally:
        sys.modules.pop("arborl.tasks.test_newbench.suites", None)
        sys.modules.pop("arborl.tasks.test_newbench", None)


def test_importing_tasks_imports_no_benchmark_and_listing_loads_no_suite():
    """`import arborl.tasks` (every env imports it) stays cheap; the first registry lookup
    imports the folders' registrations, and a suite's own modules load only with its tasks."""
    code = (
        "import sys, arborl.tasks as t\n"
        "first = sorted(m for m in sys.modules if m.startswith('arborl.'))\n"
        "names = [s.name for s in t.list_suites()]\n"
        "heavy = [m for m in ('torch', 'numpy', 'gymnasium', 'docker', 'arborl.envs', 'arborl.sandboxes',"
        " 'arborl.tasks.toy.tool_mini', 'arborl.tasks.swebench.mini') if m in sys.modules]\n"
        "print(first, len(names), heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == (
        "['arborl.tasks', 'arborl.tasks.common', 'arborl.tasks.env_packages', 'arborl.tasks.suites', "
        "'arborl.tasks.task_types'] "
        f"{sum(len(n) for n in SHIPPED.values())} []"
    )
