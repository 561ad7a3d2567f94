"""OSWorld's metrics and evaluation logic (conj, infeasible, FAIL), on real files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from desktop_helpers import task

from arborl.envs.desktop.evaluators import evaluate
from arborl.envs.desktop.osworld_metrics import (
    check_csv,
    check_direct_json_object,
    check_include_exclude,
    check_json,
    check_list,
    compare_csv,
    compare_result_files,
    compare_text_file,
    diff_text_file,
    exact_match,
    file_contains,
    fuzzy_match,
    is_in_list,
    literal_match,
    match_in_list,
)
from arborl.envs.desktop.screen import XDisplay
from arborl.envs.desktop.steps import StepContext
from arborl.envs.desktop.support import DESKTOP
from arborl.tasks.osworld import load_osworld_task


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_text_file_metrics(tmp_path):
    a = write(tmp_path, "a.txt", "Milk\n  eggs\n")
    b = write(tmp_path, "b.txt", "milk eggs")
    assert compare_text_file(a, a) == 1.0 and compare_text_file(a, b) == 0.0
    assert compare_text_file(a, b, ignore_blanks=True) == 0.0  # case still differs
    assert compare_text_file(a, b, ignore_blanks=True, ignore_case=True) == 1.0
    assert compare_text_file(None, b) == 0.0 and compare_text_file(str(tmp_path / "gone"), b) == 0.0
    assert diff_text_file(
        write(tmp_path, "c.txt", "x\ny\nz\n"), write(tmp_path, "d.txt", "x\ny\nq\n")
    ) == pytest.approx(2 / 3)
    assert file_contains(a, {"expected": ["Milk", "eggs"]}) == 1.0
    assert file_contains(a, {"expected": ["Milk", "bread"]}) == 0.0


def test_line_csv_and_json_metrics(tmp_path):
    listing = write(tmp_path, "l.txt", "beach.png\ncat.png\n")
    assert check_list(listing, {"expect": [r"^beach\.png$", r"^cat\.png$"], "unexpect": ["notes"]}) == 1.0
    assert (
        check_list(
            write(tmp_path, "m.txt", "beach.png\nnotes.txt\n"), {"expect": ["beach"], "unexpect": ["notes"]}
        )
        == 0.0
    )
    table = write(tmp_path, "t.csv", "name,qty\napple,3\n pear ,5\n")
    assert compare_csv(table, write(tmp_path, "u.csv", "name,qty\napple,3\npear,5")) == 0.0
    assert compare_csv(table, write(tmp_path, "v.csv", "name,qty\napple,3\npear ,5"), strict=False) == 1.0
    assert (
        check_csv(table, {"expect": [{"name": "apple", "qty": "3"}], "unexpect": [{"name": "kiwi"}]}) == 1.0
    )
    assert check_csv(table, {"expect": [{"name": "kiwi"}]}) == 0.0
    settings = write(tmp_path, "s.json", '{"editor": {"font": 14, "theme": "Dark"}, "tabs": ["a", "b"]}')
    rules = {
        "expect": [
            {"key": ["editor", "font"], "method": "ge", "ref": 12},
            {"key": ["editor", "theme"], "method": "re.I", "ref": "^dark$"},
            {"key": ["tabs"], "method": "str_list_eq", "ref": ["a", "b"]},
        ],
        "unexpect": [{"key": ["editor", "wrap"], "method": "eq", "ref": True}],
    }
    assert check_json(settings, rules) == 1.0
    assert check_json(settings, {"expect": [{"key": ["editor", "size"], "method": "eq", "ref": 1}]}) == 0.0
    assert (
        check_json(
            write(tmp_path, "y.yaml", "a: 1.0004\n"),
            {"expect": [{"key": ["a"], "method": "approx:0.001", "ref": 1}]},
            is_yaml=True,
        )
        == 1.0
    )
    assert check_json(write(tmp_path, "bad.json", "{"), rules) == 0.0


def test_value_metrics():
    assert exact_match(True, {"expected": True}) == 1.0 and exact_match("a", {"expected": "b"}) == 0.0
    assert (
        match_in_list("b", {"expected": ["a", "b"]}) == 1.0
        and is_in_list(["a", "b"], {"expected": "b"}) == 1.0
    )
    assert is_in_list(None, {"expected": "b"}) == 0.0
    assert check_include_exclude("all ok here", {"include": ["ok"], "exclude": ["error"]}) == 1.0
    assert check_include_exclude("ok but error", {"include": ["ok"], "exclude": ["error"]}) == 0.0
    assert check_include_exclude(None, {"include": []}) == 0.0
    assert fuzzy_match("hello world", {"expected": "hello world"}) == 1.0
    assert 0.5 < fuzzy_match("hello wrld", {"expected": "hello world"}) < 1.0
    assert literal_match("ABC", "abc", ignore_case=True) == 1.0 and literal_match("ABC", "abc") == 0.0
    assert literal_match(["A", 1], ["a", "1"], type="list", ignore_case=True) == 1.0
    assert check_direct_json_object("{'name': 'x', 'n': 2}", {"expected": {"name": "x"}}) == 1.0
    assert (
        check_direct_json_object(
            {"tags": ["a", "b"]}, {"expected": {"tags": ["z", "b"]}, "expect_in_result": True}
        )
        == 1.0
    )
    assert check_direct_json_object("not json", {"expected": {}}) == 0.0


def test_numbers_compare_as_numbers(tmp_path):
    want = write(tmp_path, "want.txt", "9\n")
    assert compare_result_files(write(tmp_path, "a", "9"), want) == 1.0
    assert compare_result_files(write(tmp_path, "b", "9.00001\n"), want) == 1.0
    assert compare_result_files(write(tmp_path, "c", "The answer is 9"), want) == 1.0
    assert compare_result_files(write(tmp_path, "d", "8"), want) == 0.0
    assert compare_result_files(write(tmp_path, "e", "nine"), want) == 0.0


def run_eval(evaluator: dict, last_action: str | None, tmp_path: Path) -> tuple[float, dict]:
    """OSWorld evaluation of rule-only metrics (no getter needs a sandbox)."""
    ev = load_osworld_task(task(evaluator=evaluator), support=DESKTOP).evaluator
    ctx = StepContext(sandbox=None, display=XDisplay(), cache_dir=tmp_path)  # type: ignore[arg-type]
    return asyncio.run(evaluate(ev, ctx, last_action))


@pytest.mark.parametrize(
    ("matches", "conj", "score"),
    [
        ([True, True], "and", 1.0),
        ([True, False], "and", 0.0),
        ([False, True], "or", 1.0),
        ([False, False], "or", 0.0),
    ],
)
def test_conj_combines_several_metrics(matches, conj, score, tmp_path):
    results = [{"type": "rule", "rules": {"v": 1}}] * len(matches)
    expected = [{"type": "rule", "rules": {"expected": {"v": 1} if m else {"v": 2}}} for m in matches]
    evaluator = {
        "func": ["exact_match"] * len(matches),
        "conj": conj,
        "result": results,
        "expected": expected,
    }
    got, details = run_eval(evaluator, "DONE", tmp_path)
    assert got == score and details["metrics"][0]["func"] == "exact_match"


def test_mixed_scores_average_with_and_and_take_the_best_with_or(tmp_path):
    fuzzy = {"type": "rule", "rules": "hello wrld"}, {"type": "rule", "rules": {"expected": "hello world"}}
    exact = {"type": "rule", "rules": 1}, {"type": "rule", "rules": {"expected": 1}}
    for conj in ("and", "or"):
        ev = {
            "func": ["fuzzy_match", "exact_match"],
            "conj": conj,
            "result": [fuzzy[0], exact[0]],
            "expected": [fuzzy[1], exact[1]],
        }
        score, _ = run_eval(ev, "DONE", tmp_path)
        ratio = fuzzy_match("hello wrld", {"expected": "hello world"})
        assert score == pytest.approx((ratio + 1) / 2 if conj == "and" else 1.0)


def test_fail_scores_infeasible_tasks_one_and_feasible_tasks_zero(tmp_path):
    assert run_eval({"func": "infeasible"}, "FAIL", tmp_path)[0] == 1.0
    assert run_eval({"func": "infeasible"}, "DONE", tmp_path)[0] == 0.0
    assert run_eval({"func": "infeasible"}, None, tmp_path)[0] == 0.0  # the budget ran out
    ok = {
        "func": "exact_match",
        "result": {"type": "rule", "rules": 1},
        "expected": {"type": "rule", "rules": {"expected": 1}},
    }
    assert run_eval(ok, "DONE", tmp_path)[0] == 1.0
    score, details = run_eval(ok, "FAIL", tmp_path)
    assert score == 0.0 and "infeasible" in details["reason"]


def test_a_metric_that_raises_scores_zero_with_the_error(tmp_path):
    ev = {
        "func": "exact_match",
        "result": {"type": "rule", "rules": 1},
        "expected": {"type": "rule", "rules": {"no_expected_key": 1}},
    }
    score, details = run_eval(ev, "DONE", tmp_path)
    assert score == 0.0 and "KeyError" in details["metrics"][0]["error"]
