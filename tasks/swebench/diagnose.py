"""Why a gold patch does not resolve its instance: the likely cause, and what to set.

    why = environment_hint(log, error, instance, environment)
    # "the tests cannot import 'cachetools' ...: set `python_path` ..., in swe.environments=FILE"

A gold patch that does not resolve means the instance's environment (or its data) is broken,
not the patch. The harness output says how: a module the tests cannot import, a test command
the runner refuses, no tests collected, test ids the log parser does not read. Each cause names
the `SWEEnvironment` key that fixes it (set in a `swe.environments` file, docs/eval.md).
"""

from __future__ import annotations

import re

from .harness import START_TEST_OUTPUT, extract_test_output
from .instance import SWEEnvironment, SWEInstance
from .log_parsers import PARSERS, parse_log

_NO_MODULE = re.compile(r"(?:ModuleNotFoundError|ImportError): No module named '?([\w.]+)'?")
_BAD_COMMAND = re.compile(
    r"error: unrecognized arguments|^ERROR: usage:|^usage: |command not found|"
    r"^bash: .*No such file or directory|can't open file",
    re.M,
)
_NOTHING_RAN = re.compile(r"collected 0 items|^no tests ran|^Ran 0 tests", re.M)
_RUNNERS = ("pytest", "_pytest", "django", "sympy")
_WHERE = "in the repository's environment, given with swe.environments=FILE (docs/eval.md)"


def _module_hint(module: str, environment: SWEEnvironment) -> str:
    top = module.split(".")[0]
    if top in _RUNNERS:
        return (
            f'the test runner cannot import {top!r}: add it to `pip` (e.g. "{top}") or set `test_cmd` '
            f"to a runner the image has, {_WHERE}"
        )
    now = list(environment.python_path or ())
    return (
        f"the tests cannot import {top!r} (ModuleNotFoundError). If it is the repository's own package "
        f"(a src layout, or a package dir set in pyproject.toml / setup.cfg), set `python_path` to the "
        f'directory holding it (e.g. ["src"]; now: {now}); if it is a dependency, add its requirement '
        f'to `pip` (e.g. "{top}"); {_WHERE}'
    )


def environment_hint(
    log: str, error: str | None, instance: SWEInstance, environment: SWEEnvironment
) -> str | None:
    """The likely cause of a gold patch not resolving `instance`, naming the key to set; None
    when the log shows tests that ran and failed for no reason this can tell."""
    if error == "patch_apply_failed":
        return (
            "the gold patch does not apply at base_commit: the instance's `patch` or `base_commit` is wrong"
        )
    if error == "test_patch_apply_failed":
        return "the test patch does not apply at base_commit: the instance's `test_patch` or `base_commit` is wrong"
    if error == "tests_timed_out":
        return f"the tests ran past {environment.test_timeout_s:g} s: raise `test_timeout_s`, {_WHERE}"
    output = extract_test_output(log) if START_TEST_OUTPUT in log else log
    m = _NO_MODULE.search(output)
    if m:
        return _module_hint(m.group(1), environment)
    m = _BAD_COMMAND.search(output)
    if m:
        return (
            f"the test command did not run ({m.group(0).strip()!r}): set `test_cmd` "
            f"(now {environment.eval_test_cmd!r}), {_WHERE}"
        )
    if _NOTHING_RAN.search(output):
        return (
            f"no tests ran on the test patch's files {instance.test_files[:3]}: set `test_cmd` or "
            f"`test_directives`, {_WHERE}"
        )
    statuses = parse_log(environment.log_parser, output)
    wanted = set(instance.FAIL_TO_PASS) | set(instance.PASS_TO_PASS)
    if not wanted & set(statuses):
        read = f"reads {len(statuses)} other test ids" if statuses else "reads no test results"
        return (
            f"the `{environment.log_parser}` log parser {read} from this log, none of FAIL_TO_PASS / "
            f"PASS_TO_PASS: set `log_parser` (one of {', '.join(sorted(PARSERS))}) or make `test_cmd` "
            f"print what it reads (pytest: -rA), {_WHERE}"
        )
    return None
