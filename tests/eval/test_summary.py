"""pass@k against hand-computed values and a brute-force enumeration; run summaries."""

from __future__ import annotations

import itertools
import math

import pytest

from arborl.eval.store import InstanceResult
from arborl.eval.summary import mean_pass_at_k, pass_at_k, summarize


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
            details={"grade": {"error": "patch_apply_failed"}},
        ),
        r("b", 1, False, status="timeout", wall_s=9.0),
        r("c", 0, False, status="infra_error", attempts=3),
    ]
    s = summarize(results, ks=[1])
    assert s["instances"] == 2 and s["samples"] == 4  # the infra error is not a result
    assert s["resolved"] == 1 and s["resolved_rate"] == 0.25
    assert s["pass_at_k"] == {1: pytest.approx((0.5 + 0.0) / 2), 2: pytest.approx((1.0 + 0.0) / 2)}
    assert s["tool_error_rate"] == pytest.approx(2 / 10)
    assert s["turns_mean"] == pytest.approx(3.0) and s["wall_s_p50"] == pytest.approx(2.5)
    assert s["grades"] == {"FULL": 1, "PARTIAL": 1, "NO": 1} and s["patch_apply_failures"] == 1
    assert s["errors"] == 1 and s["infra_errors"] == 1 and s["retried"] == 1
