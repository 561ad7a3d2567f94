"""Per-runner test-log parsers (SWE-bench's `log_parsers`) on real logs, and SWE-bench's
current grading of skipped tests.

The logs in `data/logs/` were produced by the real runners on this machine (2026-11-26):
pytest 9.0.3 with `-rA` and with `-v`; Django 4.2.16's test runner (`python -m django test
-v 2`, the runner `tests/runtests.py` drives) on a small app; sympy 1.12's own runner
(`sympy.test(path, verbose=True)`, what `bin/test --verbose` runs); `python3.11 -m unittest -v`.
Each has passing, failing, erroring and skipped tests (and XFAIL where the runner has one).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from arborl.tasks.swebench import SWEEnvironment, SWEInstance, environment_for, grade, parse_log
from arborl.tasks.swebench.harness import test_directives as directives

LOGS = Path(__file__).with_name("data") / "logs"


def read(name: str) -> str:
    return (LOGS / name).read_text()


@pytest.mark.parametrize("log", ["pytest-9-rA.log", "pytest-9-verbose.log"])
def test_pytest_both_output_styles(log):
    st = parse_log("pytest", read(log))
    assert st["test_demo.py::test_ok"] == "PASSED"
    assert st["test_demo.py::test_fail"] == "FAILED"  # "- AssertionError: ... - really" cut off
    assert st["test_demo.py::test_err"] == "ERROR"
    assert st["test_demo.py::test_xf"] == "XFAIL"
    assert st["test_demo.py::test_param[a b]"] == "PASSED"
    assert st["test_demo.py::test_param[c - d]"] == "PASSED"  # " - " inside a parametrized id
    assert not any(k.startswith("[") for k in st)  # `SKIPPED [1] file:line: reason` is no test
    if log == "pytest-9-verbose.log":
        assert st["test_demo.py::test_skip"] == "SKIPPED"  # `SKIPPED (later) [ 42%]`


def test_django_runner():
    st = parse_log("django", read("django-4.2-runner.log"))
    case = "shop.tests.PriceTests"
    assert st == {
        f"test_broken ({case}.test_broken)": "ERROR",
        f"test_discount ({case}.test_discount)": "FAILED",
        f"test_noisy ({case}.test_noisy)": "PASSED",  # `... Internal Server Error: /cart/` then `ok`
        f"test_payment ({case}.test_payment)": "SKIPPED",
        f"test_rounding_known_bug ({case}.test_rounding_known_bug)": "XFAIL",
        f"test_total ({case}.test_total)": "PASSED",
    }


def test_sympy_bin_test():
    st = parse_log("sympy", read("sympy-1.12-bin-test.log"))
    assert st == {
        "test_expand_square": "PASSED",
        "test_rational_half": "FAILED",
        "test_raises_inside": "ERROR",
        "test_needs_matplotlib": "SKIPPED",  # `test_x <reason> s`
        "test_known_bug": "XFAIL",  # `test_x f   [FAIL]`: the file's verdict is cut off
    }


def test_unittest_verbose():
    st = parse_log("unittest", read("unittest-3.11-verbose.log"))
    assert st == {
        "test_add (test_inv.Inventory.test_add)": "PASSED",
        "test_db (test_inv.Inventory.test_db)": "SKIPPED",
        "test_remove (test_inv.Inventory.test_remove)": "FAILED",
    }


def test_unknown_parser_is_refused():
    with pytest.raises(ValueError, match="unknown log parser"):
        parse_log("nose", "")
    with pytest.raises(ValueError, match="unknown log parser"):
        SWEEnvironment(log_parser="nose")


@pytest.mark.parametrize(
    ("f2p", "p2p", "status"),
    [
        (["a"], ["s"], "FULL"),  # a skipped PASS_TO_PASS is maintained (current SWE-bench)
        (["s"], [], "NO"),  # a skipped FAIL_TO_PASS is not a resolution
        (["a", "s"], ["c"], "PARTIAL"),
        (["a"], ["s", "x"], "NO"),
        (["a"], ["xp"], "NO"),  # XPASS fails: SWE-bench's parsers skip it, its grader finds it missing
        (["a"], [], "FULL"),  # a rate over no tests is 1
    ],
)
def test_grade_skipped_tests_as_swe_bench_does(f2p, p2p, status):
    statuses = {"a": "PASSED", "c": "PASSED", "s": "SKIPPED", "x": "FAILED", "xp": "XPASS"}
    report = grade(statuses, f2p, p2p)
    assert report["status"] == status
    assert ("s" in report["PASS_TO_PASS"]["success"]) == ("s" in p2p)
    assert ("s" in report["FAIL_TO_PASS"]["failure"]) == ("s" in f2p)


def test_django_test_directives_are_module_labels():
    files = ["tests/admin_views/tests.py", "tests/forms_tests/field_tests/test_x.py", "docs/a.txt"]
    assert directives(files, "django") == ["admin_views.tests", "forms_tests.field_tests.test_x"]
    assert directives(files) == files


def test_known_repositories_get_their_runner_and_parser():
    def inst(repo):
        return SWEInstance.model_validate(
            {
                "instance_id": "x-1",
                "repo": repo,
                "base_commit": "0" * 40,
                "problem_statement": "p",
                "test_patch": "diff --git a/t.py b/t.py\n",
                "FAIL_TO_PASS": ["t"],
            }
        )

    dj = environment_for(inst("django/django"))
    assert dj.log_parser == "django" and "runtests.py" in dj.test_cmd and dj.test_directives == "django"
    assert environment_for(inst("sympy/sympy")).log_parser == "sympy"
    assert environment_for(inst("me/tool")).log_parser == "pytest"
    own = SWEEnvironment(repo="django/django", test_cmd="mine")
    assert environment_for(inst("django/django"), [own]) is own  # a suite's own wins
