"""The suite registry: lazy loading, clear errors, policies from entry points."""

from __future__ import annotations

import pytest

from arborl.tasks import Suite, SuiteError, Task, get_suite, register_suite

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
