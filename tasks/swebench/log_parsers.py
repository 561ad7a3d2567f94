"""Test-log parsers: a test runner's output → {test id: status}, per runner, as SWE-bench has.

Standard library only: copied into sandboxes beside `harness.py` (which grades there for the
in-episode verifier) and imported on the host (where the evaluation re-reads the log itself).

    parse_log("pytest", log)   # -rA summary lines and verbose `id PASSED [ 50%]` lines
    parse_log("django", log)   # Django's runner (tests/runtests.py, manage.py test) at -v 2
    parse_log("unittest", log) # python -m unittest -v (the same `name ... ok` lines)
    parse_log("sympy", log)    # sympy's bin/test (`test_x ok`, `test_y F`, `test_z E`)

Statuses are SWE-bench's: PASSED FAILED SKIPPED ERROR XFAIL XPASS. Test ids are what the
runner prints, which is what FAIL_TO_PASS / PASS_TO_PASS hold for that runner: pytest node ids,
`test_name (module.Class)` for Django and unittest, `test_name` for sympy.
A new runner is one function here and one line in `PARSERS`.
"""

from __future__ import annotations

import re

STATUSES = ("PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL", "XPASS")
_ANSI = re.compile(r"\x1b\[[0-9;]*m|\[\d+m")
_SKIP_SUMMARY = re.compile(r"^\[\d+\]$")  # pytest's `SKIPPED [2] path:line: reason` is no test id
_VERBOSE = re.compile(
    r"^(?P<id>[^\s:]\S*::.+?) (?P<status>PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)"
    r"(?: \(.*\))?(?:\s+\[\s*\d+%\])?$"
)


def _cut_message(rest: str) -> str:
    """The id of a summary line's remainder: up to the first " - " outside brackets (a
    parametrized id may hold " - " itself: `test_p[c - d]`)."""
    at = rest.find(" - ")
    while at >= 0:
        head = rest[:at]
        if head.count("[") == head.count("]"):
            return head
        at = rest.find(" - ", at + 1)
    return rest


def parse_pytest(log: str) -> dict:
    """pytest: the `-rA` short summary (`PASSED tests/t.py::test_x`, `FAILED id - message`) and
    verbose progress lines (`tests/t.py::test_x PASSED [ 50%]`, `... SKIPPED (reason) [ 60%]`).

    Summary lines win over progress lines; pytest's `SKIPPED [2] path:line: reason` summary
    names no test and is left out (as SWE-bench does).
    """
    summary: dict = {}
    progress: dict = {}
    for raw in log.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        status, _, rest = line.partition(" ")
        if status in STATUSES and rest.strip():
            test = (rest if status == "PASSED" else _cut_message(rest)).strip()
            if status == "SKIPPED" and _SKIP_SUMMARY.match(test.split()[0]):
                continue
            summary[test] = status
            continue
        m = _VERBOSE.match(line)
        if m:
            progress[m.group("id")] = m.group("status")
    return {**progress, **summary}


def parse_unittest(log: str) -> dict:
    """unittest / Django at verbosity 2: `test_x (pkg.tests.Case) ... ok` (or `... FAIL`,
    `... ERROR`, `... skipped 'why'`, `... expected failure`, `... unexpected success`), and
    the `FAIL: test_x (pkg.tests.Case)` / `ERROR: ...` headers of the failure report.

    A result printed on a later line (the test wrote to stderr after ` ... `) is given to the
    last test that started. Django 4+ prints the method again in the class path
    (`test_x (pkg.tests.Case.test_x)`): kept as printed, as SWE-bench keeps it.
    """
    out: dict = {}
    pending = None
    results = (
        ("ok", "PASSED"),
        ("OK", "PASSED"),
        ("FAIL", "FAILED"),
        ("ERROR", "ERROR"),
        ("expected failure", "XFAIL"),
        ("unexpected success", "XPASS"),
    )
    for raw in log.splitlines():
        line = _ANSI.sub("", raw).strip()
        for header, status in (("FAIL: ", "FAILED"), ("ERROR: ", "ERROR")):
            if line.startswith(header) and "(" in line:
                out[line[len(header) :].strip()] = status
                break
        else:
            test, sep, result = line.partition(" ... ")
            if sep:
                pending = test.strip()
            else:
                result = line
            if pending is None:
                continue
            result = result.strip()
            if result.startswith("skipped"):
                out[pending], pending = "SKIPPED", None
                continue
            for word, status in results:
                if result == word:
                    out[pending], pending = status, None
                    break
    return out


def parse_django(log: str) -> dict:
    """Django's test runner (`tests/runtests.py --verbosity 2`, `manage.py test -v 2`): the
    unittest format, plus the one test SWE-bench names by its output rather than its id."""
    out = parse_unittest(log)
    if "--version is equivalent to version" in log:
        out["--version is equivalent to version"] = "PASSED"
    return out


_SYMPY_FAILURE_HEADER = re.compile(r"^_{3,} (\S+\.py):(\S+) _{3,}$")
_SYMPY_FILE_VERDICT = re.compile(r"\s+\[(OK|FAIL)\]$")  # closes a file's last test line


def parse_sympy(log: str) -> dict:
    """sympy's `bin/test` (`sympy.testing.runtests`) in `--verbose` mode: one line per test,
    `test_name ok` / `test_name F` / `test_name E` / `test_name f` (expected failure) /
    `test_name <reason> s` (skipped; the last test of a file is followed by `[OK]` / `[FAIL]`), and `___ path.py:test_name ___` headers
    of the failure report."""
    out: dict = {}
    words = {
        "ok": "PASSED",
        "F": "FAILED",
        "E": "ERROR",
        "f": "XFAIL",
        "X": "XPASS",
        "s": "SKIPPED",
        "w": "SKIPPED",
    }
    for raw in log.splitlines():
        line = _SYMPY_FILE_VERDICT.sub("", _ANSI.sub("", raw).strip())
        m = _SYMPY_FAILURE_HEADER.match(line)
        if m:
            out.setdefault(m.group(2), "FAILED")
            continue
        if not line.startswith("test_"):
            continue
        parts = line.split()
        if len(parts) >= 2 and parts[-1] in words:
            out[parts[0]] = words[parts[-1]]
    return out


PARSERS = {
    "pytest": parse_pytest,
    "unittest": parse_unittest,
    "django": parse_django,
    "sympy": parse_sympy,
}


def parse_log(parser: str, log: str) -> dict:
    """The statuses `parser` (a key of PARSERS) reads from `log`."""
    try:
        fn = PARSERS[parser]
    except KeyError:
        raise ValueError(f"unknown log parser {parser!r}; one of {sorted(PARSERS)}") from None
    return fn(log)
