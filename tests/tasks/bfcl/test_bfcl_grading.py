"""BFCL grading and backends: scores from bfcl-eval's checker, agent text kept away from
the backends' internals."""

from __future__ import annotations

import pytest

from arborl.tasks.bfcl.backends import Backends
from arborl.tasks.bfcl.data import load_category
from arborl.tasks.bfcl.grading import score_multi_turn, score_single
from arborl.tasks.bfcl.policies import gold_calls


def test_gold_calls_pass_and_a_changed_value_fails_bfcls_checker() -> None:
    task = load_category("simple_python", 2)[1]  # math.factorial(number=5)
    assert score_single(task, gold_calls(task)).valid
    verdict = score_single(task, [("math.factorial", {"number": 6})])
    assert not verdict.valid and verdict.error_type.startswith("value_error")
    assert not score_single(task, None).valid


def test_irrelevance_is_right_only_when_abstaining() -> None:
    task = load_category("irrelevance", 1)[0]
    assert score_single(task, []).valid
    assert not score_single(task, [(task.entry["function"][0]["name"], {})]).valid


@pytest.fixture
def backends() -> Backends:
    return Backends(load_category("multi_turn_base", 1)[0].entry, long_context=False)


@pytest.mark.parametrize(
    "name",
    [
        "_load_scenario",
        "__init__",
        "__class__",
        "__dict__",
        "root",
        "open",
        "eval",
        "os.system",
        "importlib.import_module",
    ],
)
def test_a_call_naming_a_private_attribute_or_a_non_tool_is_refused(backends: Backends, name: str) -> None:
    state = {k: repr(v) for k, v in vars(backends.instances["GorillaFileSystem"]).items()}
    result = backends.call(name, {"scenario": {}, "source": "x"})
    assert result == f"Error during execution: name '{name}' is not defined"
    assert {k: repr(v) for k, v in vars(backends.instances["GorillaFileSystem"]).items()} == state


def test_blocked_names_are_refused_as_bfcl_refuses_them(backends: Backends) -> None:
    assert backends.call("exit", {}) == "Error during execution: Function call exit is not allowed."
    assert backends.call("os.popen", {}) == "Error during execution: Function call popen is not allowed."


def test_each_run_gets_fresh_backends() -> None:
    entry = load_category("multi_turn_base", 1)[0].entry
    one, two = Backends(entry, long_context=False), Backends(entry, long_context=False)
    one.call("mkdir", {"dir_name": "only_in_one"})
    assert "only_in_one" in one.call("ls", {})
    assert "only_in_one" not in two.call("ls", {})


def test_a_multi_turn_run_that_leaves_the_wrong_state_fails() -> None:
    task = load_category("multi_turn_base", 1)[0]
    b = Backends(task.entry, long_context=False)
    from arborl.tasks.bfcl.backends import parse_ground_truth_call

    gold = [[[parse_ground_truth_call(c, b) for c in calls]] if calls else [] for calls in task.ground_truth]
    assert score_multi_turn(task, gold).valid
    short = [list(t) for t in gold]
    short[0] = [gold[0][0][:-1]]
    verdict = score_multi_turn(task, short)
    assert not verdict.valid and verdict.error_type.startswith("multi_turn:")
    assert score_multi_turn(task, gold[:-1]).error_type == "multi_turn:force_terminated"
