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
"test_files", "FAIL_TO_PASS", "PASS_TO_PASS", "timeout_s"}.
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

STATUSES = ("PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL", "XPASS")
_PASSING = ("PASSED", "XFAIL")
_DIFF_FILE = re.compile(r"^diff --git a/(.+?) b/(.+?)$", re.M)


def parse_pytest_log(log: str) -> dict:
    """Test id → status from pytest's `-rA` summary lines (`PASSED tests/t.py::test_x`).

    Like SWE-bench's `parse_log_pytest`, but a line's message is cut at the first " - "
    rather than by splitting on spaces, so parametrized ids with spaces survive.
    """
    out = {}
    for line in log.splitlines():
        status, _, rest = line.partition(" ")
        if status not in STATUSES or not rest.strip():
            continue
        if " - " in rest:  # FAILED / ERROR / XFAIL lines end in " - <message>"
            rest = rest.split(" - ", 1)[0]
        out[rest.strip()] = status
    return out


def grade(statuses: dict, fail_to_pass: list, pass_to_pass: list) -> dict:
    """SWE-bench's report: which FAIL_TO_PASS / PASS_TO_PASS tests pass, and the status.

    FULL: every FAIL_TO_PASS and every PASS_TO_PASS test passes. PARTIAL: some but not all
    FAIL_TO_PASS pass and every PASS_TO_PASS passes. NO: anything else. A test missing
    from the log counts as failing; an empty list counts as all passing.
    """

    def split(tests: list) -> tuple:
        ok = [t for t in tests if statuses.get(t) in _PASSING]
        return ok, [t for t in tests if statuses.get(t) not in _PASSING]

    f2p_ok, f2p_bad = split(list(fail_to_pass))
    p2p_ok, p2p_bad = split(list(pass_to_pass))
    f2p_rate = len(f2p_ok) / len(fail_to_pass) if fail_to_pass else 1.0
    p2p_rate = len(p2p_ok) / len(pass_to_pass) if pass_to_pass else 1.0
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


def files_in_patch(test_patch: str) -> list:
    """The files a test patch touches (SWE-bench's test directives for pytest)."""
    seen = []
    for _, b in _DIFF_FILE.findall(test_patch):
        if b not in seen:
            seen.append(b)
    return seen


def _run(cmd: list, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, **kw
    )


def _git(*args: str) -> subprocess.CompletedProcess:
    return _run(["git", "-c", "core.quotepath=off", *args])


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
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    base = resolve_base(spec.get("base_commit", ""))
    model_patch = spec.get("model_patch")
    if model_patch:
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
    cmd = ["bash", "-c", spec["test_cmd"] + " " + " ".join(_quote(p) for p in files)]
    print(START_TEST_OUTPUT, flush=True)
    try:
        log = _run(cmd, timeout=float(spec.get("timeout_s", 1800))).stdout
    except subprocess.TimeoutExpired as e:
        log = (e.output or "") if isinstance(e.output, str) else ""
        log += "\n[the tests timed out]\n"
    print(log, end="" if log.endswith("\n") else "\n")
    print(END_TEST_OUTPUT, flush=True)
    report = grade(parse_pytest_log(log), spec["FAIL_TO_PASS"], spec["PASS_TO_PASS"])
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
