"""pass@k against hand-computed values and a brute-force enumeration; run summaries."""

from __future__ import annotations

import itertools
import math

import pytest

from arborl.envs.code.swe_grading import SWEBench, swe_grade
from arborl.eval.result_store import InstanceResult
from arborl.eval.summary import grade_details, mean_pass_at_k, pass_at_k, summarize
from arborl.tasks.swebench.grading import SWEGrade


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 1, 1, 1 / 5),  # pass@1 is c / n
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (4, 0, 2, 0.0),
        (3, 3, 1, 1.0),
        (4, 3, 2, 1.0),  # n - c < k: every draw of 2 holds a correct one
        (200, 13, 10, 1 - math.comb(187, 10) / math.comb(200, 10)),
    ],
)
def test_pass_at_k_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize(("n", "c"), [(6, 0), (6, 1), (6, 4), (7, 3)])
def test_pass_at_k_equals_the_fraction_of_k_subsets_with_a_correct_sample(n, c):
    samples = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(samples, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_pass_at_k_refuses_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)
    assert mean_pass_at_k([(2, 1), (2, 0), (1, 1)], 2) == pytest.approx(0.5)  # (1, 1): n < k, left out
    assert mean_pass_at_k([(1, 0)], 2) is None


def r(iid, sample, success, **kw):
    return InstanceResult(
        instance_id=iid, sample=sample, status=kw.pop("status", "done"), success=success, **kw
    )


def unapplied_patch() -> dict:
    """The details a result keeps of SWE-bench's grade of a patch that applies neither way."""
    grade = swe_grade(SWEGrade.unresolved("patch_apply_failed", patch_applied=False), "")
    return grade_details(grade, SWEBench.unresolved_kinds)


def test_summary_of_a_run():
    results = [
        r("a", 0, True, turns=2, tool_calls=4, tool_errors=1, wall_s=1.0, grade="FULL", score=1.0),
        r("a", 1, False, turns=4, tool_calls=4, tool_errors=0, wall_s=3.0, grade="PARTIAL"),
        r(
            "b",
            0,
            False,
            turns=6,
            tool_calls=2,
            tool_errors=1,
            wall_s=2.0,
            grade="NO",
            details=unapplied_patch(),
        ),
        r("b", 1, False, status="timeout", wall_s=9.0),
        r("c", 0, False, status="infra_error", attempts=3),
    ]
    s = summarize(results, ks=[1], kinds=SWEBench.unresolved_kinds)
    # every sample counts: the infrastructure error is an unresolved sample of instance c
    assert s["instances"] == 3 and s["samples"] == 5 and s["episodes"] == 4
    assert s["resolved"] == 1 and s["resolved_rate"] == 0.2 and s["unresolved"] == 4
    # pass@1: a 1/2, b 0/2, c 0/1; pass@2: c has one sample only and is left out
    assert s["pass_at_k"] == {1: pytest.approx((0.5 + 0.0 + 0.0) / 3), 2: pytest.approx((1.0 + 0.0) / 2)}
    assert s["tool_error_rate"] == pytest.approx(2 / 10)
    assert s["turns_mean"] == pytest.approx(3.0) and s["wall_s_p50"] == pytest.approx(2.5)
    assert s["grades"] == {"FULL": 1, "PARTIAL": 1, "NO": 1}
    assert s["grade_errors"] == {"patch_apply_failed": 1}
    assert s["errors"] == 1 and s["infra_errors"] == 1 and s["retried"] == 1
    assert s["unresolved_by_kind"] == {
        "failed": 1,
        "patch_apply": 1,
        "agent_crash": 0,
        "timeout": 1,
        "error": 0,
        "infrastructure": 1,
        "environment": 0,
    }
    assert s["headline"] == (
        "resolved 1/5 (20.0%) · unresolved 4: 1 failed, 1 patch-apply failure, 1 timeout, "
        "1 infrastructure error"
    )


def test_a_stored_run_names_its_benchmarks_kinds_without_the_benchmark():
    """`arborl eval-report` and the viewer summarize stored results without the suite's hook:
    each result keeps its kind's labels, so the headline is the one the run printed; the kinds
    the hook declares are counted even at zero when they are given (summary.json keeps them)."""
    results = [r("a", 0, False, grade="NO", details=unapplied_patch()), r("b", 0, False, status="timeout")]
    alone = summarize(results)
    assert alone["headline"] == "resolved 0/2 (0.0%) · unresolved 2: 1 patch-apply failure, 1 timeout"
    assert list(alone["unresolved_by_kind"])[:3] == ["failed", "patch_apply", "agent_crash"]
    assert alone["unresolved_kinds"]["patch_apply"] == ["patch-apply failure", "patch-apply failures"]
    none_failed = summarize([r("a", 0, True)], kinds=alone["unresolved_kinds"])
    assert none_failed["unresolved_by_kind"]["patch_apply"] == 0
    assert "patch_apply" not in summarize([r("a", 0, True)])["unresolved_by_kind"]  # another benchmark's


def test_a_grade_may_name_only_the_kinds_its_hook_declares():
    from arborl.envs.benchmarks import Grade

    with pytest.raises(ValueError, match="unresolved_kinds"):
        grade_details(Grade(0.0, False, unresolved_kind="typo"), SWEBench.unresolved_kinds)
    assert "unresolved" not in grade_details(Grade(1.0, True, unresolved_kind="typo"), {})  # resolved


def test_two_solved_and_one_environment_error_is_two_of_three():
    """The issue's case: 2 solved of 3, the third's environment broken (SWE-bench reports
    resolved over all instances, an errored one unresolved)."""
    results = [r("a", 0, True), r("b", 0, True), r("c", 0, False, status="env_error")]
    s = summarize(results)
    assert (s["resolved"], s["samples"], s["resolved_rate"]) == (2, 3, pytest.approx(2 / 3))
    assert s["pass_at_k"] == {1: pytest.approx(2 / 3)} and s["env_errors"] == 1
    assert s["headline"] == "resolved 2/3 (66.7%) · unresolved 1: 1 environment error"


def test_a_crash_the_agent_caused_is_a_failure_in_every_rate():
    """Issue 31's case: 1 solved plus 1 that crashed its own sandbox is 50 %, not 100 %."""
    results = [
        r("a", 0, True, turns=2),
        r("b", 0, False, status="agent_crash", turns=3, error="the agent crashed its sandbox: OOM"),
    ]
    s = summarize(results)
    assert s["resolved_rate"] == 0.5 and s["pass_at_k"] == {1: 0.5}
    assert s["agent_crashes"] == 1 and s["errors"] == 1 and s["turns_mean"] == 2.5
    assert s["headline"] == "resolved 1/2 (50.0%) · unresolved 1: 1 agent crash"


def test_results_stored_before_the_change_still_load_and_count(tmp_path):
    """A results.sqlite as the store wrote it before (same schema, old statuses): it loads,
    its finished rows are kept on resume, and its errors now count as unresolved."""
    import sqlite3

    from arborl.eval.result_store import ResultStore

    db = sqlite3.connect(tmp_path / "results.sqlite")
    db.executescript(
        """
        CREATE TABLE runs (run_id TEXT PRIMARY KEY, suite TEXT NOT NULL, agent TEXT NOT NULL,
            config TEXT NOT NULL, schema INTEGER NOT NULL, created REAL NOT NULL, updated REAL NOT NULL);
        CREATE TABLE results (run_id TEXT NOT NULL, instance_id TEXT NOT NULL, sample INTEGER NOT NULL,
            status TEXT NOT NULL, success INTEGER NOT NULL, score REAL NOT NULL, grade TEXT NOT NULL,
            turns INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL, response_tokens INTEGER NOT NULL,
            tokens_exact INTEGER NOT NULL, tool_calls INTEGER NOT NULL, tool_errors INTEGER NOT NULL,
            wall_s REAL NOT NULL, attempts INTEGER NOT NULL, error TEXT, details TEXT NOT NULL,
            finished_at REAL NOT NULL, PRIMARY KEY (run_id, instance_id, sample));
        INSERT INTO runs VALUES ('old', 'swe-mini', 'gold', '{}', 1, 0, 0);
        INSERT INTO results VALUES ('old', 'a', 0, 'done', 1, 1.0, 'FULL', 3, 0, 0, 0, 0, 0, 1.0, 1, NULL,
            '{"grade": {"status": "FULL", "error": null}}', 0);
        INSERT INTO results VALUES ('old', 'b', 0, 'done', 0, 0.0, 'NO', 3, 0, 0, 0, 0, 0, 1.0, 1, NULL,
            '{"grade": {"status": "NO", "error": "patch_apply_failed"}}', 0);
        INSERT INTO results VALUES ('old', 'c', 0, 'env_error', 0, 0.0, '', 0, 0, 0, 0, 0, 0, 1.0, 1,
            'the gold patch does not resolve', '{}', 0);
        """
    )
    db.close()
    store = ResultStore(tmp_path / "results.sqlite", "old")
    assert store.finished() == {("a", 0), ("b", 0)}  # c is tried again on resume
    s = summarize(store.results())
    store.close()
    # its patch that did not apply was stored before grades named their own kind: a plain
    # failure now, its grade's error still counted (and shown as `grade: patch_apply_failed`)
    assert s["headline"] == "resolved 1/3 (33.3%) · unresolved 2: 1 failed, 1 environment error"
    assert s["grade_errors"] == {"patch_apply_failed": 1}
