"""The first failing hunk of a patch, read from what the grading harness printed when it
tried the patch with real `git apply` and `patch` in a real repository."""

from __future__ import annotations

import subprocess

import pytest

from arborl.tasks.swebench.harness import apply_patch
from arborl.tasks.swebench.hunks import first_failing_hunk

FILE = "".join(f"line {i}\n" for i in range(1, 31))
PATCH = """diff --git a/m.py b/m.py
--- a/m.py
+++ b/m.py
@@ -2,3 +2,3 @@ def top():
 line 2
-line 3
+LINE 3
 line 4
@@ -20,3 +20,3 @@ def bottom():
 line 20
-line 21 (not what the file has)
+LINE 21
 line 22
"""


@pytest.fixture
def repo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text(FILE)
    subprocess.run(["git", "init", "-q"], check=True)
    subprocess.run(["git", "add", "."], check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"], check=True)
    return tmp_path


def harness_log(repo, patch: str, capsys) -> str:
    (repo / "model.patch").write_text(patch)
    assert apply_patch(str(repo / "model.patch")) is False
    return capsys.readouterr().out


def test_the_hunk_git_stopped_at_not_the_first_one(repo, capsys):
    log = harness_log(repo, PATCH, capsys)
    hunk = first_failing_hunk(log, PATCH)
    assert hunk is not None and hunk.summary() == "m.py:20 @@ -20,3 +20,3 @@ def bottom():"
    assert hunk.text.splitlines()[2] == "-line 21 (not what the file has)"


def test_the_report_of_patch_when_git_says_nothing(repo, capsys):
    log = harness_log(repo, PATCH, capsys)
    patch_only = "\n".join(line for line in log.splitlines() if not line.startswith(("error:", "Checking")))
    hunk = first_failing_hunk(patch_only, PATCH)
    assert hunk is not None and (hunk.file, hunk.line) == ("m.py", 20) and "Hunk #2 FAILED" in hunk.why
    assert hunk.header == "@@ -20,3 +20,3 @@ def bottom():"


def test_an_error_that_names_no_hunk_is_shown_as_git_said_it(repo, capsys):
    missing = PATCH.replace("m.py", "gone.py")
    hunk = first_failing_hunk(harness_log(repo, missing, capsys), missing)
    assert hunk is not None and hunk.summary() == "error: gone.py: No such file or directory"
    assert first_failing_hunk("", PATCH) is None


def test_swe_benchs_grade_says_which_hunk_and_the_report_shows_it(repo, capsys):
    """The SWE hook puts the hunk in the grade (its kind, why, the hunk under it); the report's
    error column and the console show them without knowing what a hunk is."""
    from arborl.envs.code.swe_grading import SWEBench, swe_grade
    from arborl.eval.report import error_cell
    from arborl.eval.result_store import InstanceResult
    from arborl.eval.summary import grade_details
    from arborl.tasks.swebench.grading import SWEGrade

    log = harness_log(repo, PATCH, capsys)
    grade = swe_grade(SWEGrade.unresolved("patch_apply_failed", patch_applied=False, log=log), PATCH)
    assert (grade.unresolved_kind, grade.error) == ("patch_apply", "patch_apply_failed")
    assert grade.why == "patch did not apply: m.py:20 @@ -20,3 +20,3 @@ def bottom():"
    details = grade_details(grade, SWEBench.unresolved_kinds)
    result = InstanceResult(instance_id="i", sample=0, status="done", grade="NO", details=details)
    first, _, hunk = error_cell(result).partition("\n")
    assert first == grade.why and "-line 21 (not what the file has)" in hunk.splitlines()
    # a grade with another error has no why of its own: the report says the error's code
    empty = grade_details(swe_grade(SWEGrade.unresolved("empty_patch", empty_patch=True), ""), {})
    assert error_cell(InstanceResult(instance_id="i", sample=0, status="done", details=empty)) == (
        "grade: empty_patch"
    )


def test_a_result_stored_before_grades_said_why_shows_its_grade_error():
    """A run directory from before: its hunk is in the SWE grade's own details, which the
    report no longer reads; the error column falls back to the grade's error code."""
    from arborl.eval.report import error_cell
    from arborl.eval.result_store import InstanceResult

    hunk = {
        "file": "m.py",
        "line": 20,
        "header": "@@ -20,3 +20,3 @@",
        "text": "@@ -20,3 +20,3 @@\n-x",
        "why": "",
    }
    old = InstanceResult(
        instance_id="i",
        sample=0,
        status="done",
        grade="NO",
        error="the agent gave up",
        details={"grade": {"status": "NO", "error": "patch_apply_failed"}, "first_failing_hunk": hunk},
    )
    assert error_cell(old) == "grade: patch_apply_failed; the agent gave up"
