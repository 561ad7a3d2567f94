"""arborl's log parsers and grading against SWE-bench's own (the `swebench` package, installed
without its dependencies by scripts/setup.sh): on real runner output, every test id SWE-bench's
parser reads gets the same verdict from arborl's parser and grade as from SWE-bench's
`get_eval_tests_report` / `get_resolution_status`; and the repositories SWE-bench has a parser
for are read with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from arborl.tasks.swebench import grade, parse_log
from arborl.tasks.swebench.official import OFFICIAL, official_parser, read_statuses

LOGS = Path(__file__).with_name("data") / "logs"
STATUS = {"RESOLVED_FULL": "FULL", "RESOLVED_PARTIAL": "PARTIAL", "RESOLVED_NO": "NO"}


DEMO = """
import pytest

def test_ok(): pass
def test_fail(): assert 1 == 2, "a - b"
@pytest.fixture
def broken(): raise RuntimeError("setup")
def test_err(broken): pass
@pytest.mark.skip(reason="later")
def test_skip(): pass
@pytest.mark.xfail(reason="known")
def test_xf(): assert False
@pytest.mark.xfail(reason="fixed already")
def test_xp(): pass
@pytest.mark.parametrize("p", ["a b", "c - d", "plain"])
def test_param(p): assert p != "c - d"
"""


@pytest.fixture(scope="module")
def pytest_log(tmp_path_factory) -> str:
    """pytest's own -rA output for every outcome, parametrized ids with spaces included."""
    tmp = tmp_path_factory.mktemp("demo")
    (tmp / "test_demo.py").write_text(DEMO)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "test_demo.py"],
        cwd=tmp,
        capture_output=True,
        text=True,
    )
    assert "XPASS" in r.stdout and "test_param[a b]" in r.stdout, r.stdout
    return r.stdout


def verdicts(official, statuses_ours: dict, statuses_theirs: dict, f2p: list, p2p: list) -> tuple:
    ours = grade(statuses_ours, f2p, p2p)
    gold = {"FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p}
    report = official["grading"].get_eval_tests_report(statuses_theirs, gold)
    theirs = STATUS[official["grading"].get_resolution_status(report)]
    lists = {k: report[k] for k in ("FAIL_TO_PASS", "PASS_TO_PASS")}
    return (ours["status"], {k: ours[k] for k in lists}), (theirs, lists)


def cases(official, log: str, ours: str, theirs: str):
    """(arborl's statuses, SWE-bench's statuses, the ids SWE-bench's instances could name)."""
    mine = parse_log(ours, log)
    spec = official["TestSpec"]("i", "", [], "r", "", [], [])
    official_map = official["parsers"][theirs](log, spec)
    return mine, official_map, sorted(official_map)


@pytest.mark.parametrize(
    ("log", "ours", "theirs"),
    [
        ("pytest", "pytest", "parse_log_pytest"),
        ("pytest-9-rA.log", "pytest", "parse_log_pytest"),
        ("pytest-9-verbose.log", "pytest", "parse_log_pytest"),
        ("django-4.2-runner.log", "django", "parse_log_django"),
        ("unittest-3.11-verbose.log", "unittest", "parse_log_django"),
        ("sympy-1.12-bin-test.log", "sympy", "parse_log_sympy"),
    ],
)
def test_verdicts_agree_with_swe_bench_on_real_logs(official, pytest_log, log, ours, theirs):
    text = pytest_log if log == "pytest" else (LOGS / log).read_text()
    mine, official_map, ids = cases(official, text, ours, theirs)
    assert ids
    for test in ids:  # each id as the one FAIL_TO_PASS, then as the one PASS_TO_PASS
        for f2p, p2p in (([test], []), ([ids[0]], [test])):
            a, b = verdicts(official, mine, official_map, f2p, p2p)
            assert a == b, (test, a, b)
    a, b = verdicts(official, mine, official_map, ids, ids)  # all of them at once
    assert a == b


def test_an_xpass_fails_as_swe_bench_finds_it_missing(official, pytest_log):
    """SWE-bench's pytest parser skips XPASS lines (its TestStatus has none): an instance's test
    that XPASSes (a conftest marking tests xfail) is missing to its grader, a failure."""
    mine, official_map, _ = cases(official, pytest_log, "pytest", "parse_log_pytest")
    xp, ok = "test_demo.py::test_xp", "test_demo.py::test_ok"
    assert mine[xp] == "XPASS" and xp not in official_map
    for f2p, p2p in (([xp], [ok]), ([ok], [xp])):
        a, b = verdicts(official, mine, official_map, f2p, p2p)
        assert a == b and a[0] == "NO", (a, b)


def test_swe_bench_repositories_are_read_with_swe_bench_parsers(official, pytest_log):
    assert official_parser("django/django") == "parse_log_django"
    assert official_parser("psf/requests") == "parse_log_requests"
    assert official_parser("astropy/astropy") == "parse_log_astropy"
    assert official_parser("tkem/cachetools") is None
    statuses, parser = read_statuses("psf/requests", "pytest", pytest_log)
    spec = official["TestSpec"]("i", "", [], "psf/requests", "", [], [])
    assert parser == OFFICIAL + "parse_log_requests"
    assert statuses == official["parsers"]["parse_log_requests"](pytest_log, spec)
    assert read_statuses("me/tool", "pytest", pytest_log) == (parse_log("pytest", pytest_log), "pytest")
