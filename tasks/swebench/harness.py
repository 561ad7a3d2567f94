"""SWE-bench evaluation inside a sandbox: apply the patches, run the tests, read the log.

This file is copied into sandboxes and run there as a script (`python3 harness.py spec.json`),
so it uses the standard library only. It is also imported on the host, where the grader
re-reads the test log itself (`parse_pytest_log`, `grade`) rather than trusting a verdict
printed from inside the sandbox, which a model patch could forge.

What it does, in the repository (the working directory), as SWE-bench's harness does:

1. apply the model patch if the spec names one (`git apply`, then `patch --fuzz=5`);
   a patch that applies neither way is reported as such (exit 90);
2. put the files the test patch touches back to the base commit, then apply the test patch
   (exit 91 if it does not apply);
3. run the test command on the test patch's files, printing the log between markers;
4. grade: FAIL_TO_PASS and PASS_TO_PASS against the log; exit 0 only when FULL.

spec.json: {"base_commit", "test_patch" (path), "model_patch" (path or null), "test_cmd",
"test_files", "test_directives" (paths | django), "log_parser" (a `log_parsers.PARSERS` key),
"FAIL_TO_PASS", "PASS_TO_PASS", "timeout_s"}. `log_parsers.py` must sit beside this file.

It runs as the agent's user, from a directory only root writes, under `python3 -I`, after
every process of the episode was killed. It makes itself non-dumpable so that the tests it
starts (the model's code, the same user) can neither trace it nor read or write its memory,
and its git ignores any configuration but the repository's own, with the commands that
configuration could make git run (hooks, fsmonitor, external diff and pager) turned off.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

APPLY_OK = ">>>>> Applied Patch"
APPLY_FAILED = ">>>>> Patch Apply Failed"
TEST_PATCH_FAILED = ">>>>> Test Patch Apply Failed"
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
GRADE_PREFIX = "ARBORL_GRADE "
EXIT_APPLY_FAILED = 90
EXIT_TEST_PATCH_FAILED = 91

try:  # imported on the host as part of the package; run in a sandbox as a script beside it
    from . import log_parsers
except ImportError:  # pragma: no cover - the sandbox side
    # `python3 -I` puts neither the script's directory nor the working directory on sys.path.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import log_parsers  # type: ignore[no-redef]

STATUSES = log_parsers.STATUSES
_PASSING = ("PASSED", "XFAIL")
_DIFF_FILE = re.compile(r"^diff --git a/(.+?) b/(.+?)$", re.M)


def parse_pytest_log(log: str) -> dict:
    """Test id → status from pytest's output (see `log_parsers.parse_pytest`)."""
    return log_parsers.parse_pytest(log)


def grade(statuses: dict, fail_to_pass: list, pass_to_pass: list) -> dict:
    """SWE-bench's report: which FAIL_TO_PASS / PASS_TO_PASS tests pass, and the status.

    As current SWE-bench (`swebench/harness/grading.py`): a FAIL_TO_PASS test succeeds when it
    PASSED or XFAILed and fails otherwise (FAILED, ERROR, SKIPPED, missing from the log); a
    PASS_TO_PASS test is *maintained* when it passed or was SKIPPED (a skip is no regression)
    and fails otherwise. An XPASS fails both: SWE-bench's parsers do not read XPASS lines, so
    its grader finds such a test missing. A rate over no tests is 1. A parametrized id with
    more `[` than `]` (SWE-bench Verified holds ids cut at a space) is read from the ids it
    begins, as SWE-bench's `_resolve_case` does.

    FULL: every FAIL_TO_PASS and PASS_TO_PASS test succeeds. PARTIAL: some but not all
    FAIL_TO_PASS succeed and every PASS_TO_PASS is maintained. NO: anything else.
    """

    def status_of(test: str):
        if test in statuses or test.count("[") <= test.count("]"):
            return statuses.get(test)
        # SWE-bench's datasets hold parametrized ids cut at a space (`test_x[a`): as its grader,
        # such an id takes the status of the ids it begins, when they agree on pass or fail
        found = [k for k in statuses if k.startswith(test)]
        if found and len({statuses[k] in _PASSING for k in found}) == 1:
            return statuses[found[0]]
        return None

    def split(tests: list, ok_statuses: tuple) -> tuple:
        ok = [t for t in tests if status_of(t) in ok_statuses]
        return ok, [t for t in tests if status_of(t) not in ok_statuses]

    f2p_ok, f2p_bad = split(list(fail_to_pass), _PASSING)
    p2p_ok, p2p_bad = split(list(pass_to_pass), (*_PASSING, "SKIPPED"))

    def rate(ok: list, bad: list) -> float:
        return len(ok) / (len(ok) + len(bad)) if ok or bad else 1.0

    f2p_rate, p2p_rate = rate(f2p_ok, f2p_bad), rate(p2p_ok, p2p_bad)
    if f2p_rate == 1 and p2p_rate == 1:
        status = "FULL"
    elif 0 < f2p_rate < 1 and p2p_rate == 1:
        status = "PARTIAL"
    else:
        status = "NO"
    return {
        "status": status,
        "FAIL_TO_PASS": {"success": f2p_ok, "failure": f2p_bad},
        "PASS_TO_PASS": {"success": p2p_ok, "failure": p2p_bad},
    }


def test_directives(files: list, style: str = "paths") -> list:
    """What the test command is given for the test patch's files.

    `paths`: the files as they are (pytest, sympy's bin/test). `django`: Django's runtests.py
    module labels, as SWE-bench derives them: `tests/` dropped, `.py` dropped, `/` → `.`
    (`tests/admin_views/tests.py` → `admin_views.tests`); non-Python files are left out.
    """
    if style == "paths":
        return list(files)
    if style == "django":
        out = []
        for f in files:
            if not f.endswith(".py"):
                continue
            label = f[: -len(".py")]
            label = label[len("tests/") :] if label.startswith("tests/") else label
            out.append(label.replace("/", "."))
        return out
    raise ValueError(f"unknown test directive style {style!r}; one of paths, django")


def files_in_patch(test_patch: str) -> list:
    """The files a test patch touches (SWE-bench's test directives for pytest)."""
    seen = []
    for _, b in _DIFF_FILE.findall(test_patch):
        if b not in seen:
            seen.append(b)
    return seen


#: No system or global git configuration, no prompts; `GIT_INERT_ARGS` switch off what the
#: repository's own configuration could make git run.
GIT_INERT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
    "GIT_EXTERNAL_DIFF": "",
}
GIT_INERT_ARGS = [
    "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.attributesFile=/dev/null",
    "-c", "diff.external=", "-c", "core.pager=cat", "-c", "core.sshCommand=false", "-c", "protocol.allow=never",
    "-c", "core.quotepath=off",
]  # fmt: skip


def _run(cmd: list, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, **kw
    )


def _git(*args: str) -> subprocess.CompletedProcess:
    return _run(["git", *GIT_INERT_ARGS, *args], env={**os.environ, **GIT_INERT_ENV})


def _nondumpable() -> None:
    """Keep processes of the same user (the tests, the model's code) out of this one."""
    import contextlib
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def resolve_base(base_commit: str) -> str:
    """The base commit if this repository has it, else its root commit (a repository made
    from the files at the base commit has a history of its own)."""
    if base_commit and _git("cat-file", "-e", base_commit + "^{commit}").returncode == 0:
        return base_commit
    roots = _git("rev-list", "--max-parents=0", "HEAD").stdout.split()
    return roots[-1] if roots else "HEAD"


def apply_patch(path: str) -> bool:
    """`git apply`, then `patch --fuzz=5` (what SWE-bench tries), each all or nothing."""
    r = _git("apply", "--verbose", "--whitespace=nowarn", path)
    print(r.stdout, end="")
    if r.returncode == 0:
        return True
    dry = _run(["patch", "--batch", "--fuzz=5", "-p1", "--dry-run", "-i", path])
    print(dry.stdout, end="")
    if dry.returncode != 0:
        return False
    return _run(["patch", "--batch", "--fuzz=5", "-p1", "-i", path]).returncode == 0


def main(spec_path: str) -> int:
    _nondumpable()
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    base = resolve_base(spec.get("base_commit", ""))
    model_patch = spec.get("model_patch")
    if model_patch and os.path.getsize(model_patch) > 0:
        if not apply_patch(model_patch):
            print(APPLY_FAILED, flush=True)
            return EXIT_APPLY_FAILED
        print(APPLY_OK, flush=True)
    files = list(spec["test_files"])
    for path in files:  # the test patch is applied to the base version of its files
        if _git("cat-file", "-e", f"{base}:{path}").returncode == 0:
            _git("checkout", base, "--", path)
        elif os.path.lexists(path):
            os.remove(path)
    r = _git("apply", "--verbose", "--whitespace=nowarn", spec["test_patch"])
    print(r.stdout, end="")
    if r.returncode != 0:
        print(TEST_PATCH_FAILED, flush=True)
        return EXIT_TEST_PATCH_FAILED
    targets = test_directives(files, spec.get("test_directives", "paths"))
    cmd = ["bash", "-c", spec["test_cmd"] + " " + " ".join(_quote(p) for p in targets)]
    print(START_TEST_OUTPUT, flush=True)
    try:
        # No user site: a .pth or usercustomize in the agent's home must not run in the tests.
        env = {**os.environ, "PYTHONNOUSERSITE": "1"}
        log = _run(cmd, timeout=float(spec.get("timeout_s", 1800)), env=env).stdout
    except subprocess.TimeoutExpired as e:
        log = (e.output or "") if isinstance(e.output, str) else ""
        log += "\n[the tests timed out]\n"
    print(log, end="" if log.endswith("\n") else "\n")
    print(END_TEST_OUTPUT, flush=True)
    statuses = log_parsers.parse_log(spec.get("log_parser", "pytest"), log)
    report = grade(statuses, spec["FAIL_TO_PASS"], spec["PASS_TO_PASS"])
    print(GRADE_PREFIX + json.dumps(report), flush=True)
    return 0 if report["status"] == "FULL" else 1


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


def extract_test_output(output: str) -> str:
    """The test log between the markers of a harness run ('' if the tests did not run)."""
    start, end = output.find(START_TEST_OUTPUT), output.rfind(END_TEST_OUTPUT)
    if start < 0:
        return ""
    return output[start + len(START_TEST_OUTPUT) : end if end > start else len(output)].strip("\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
