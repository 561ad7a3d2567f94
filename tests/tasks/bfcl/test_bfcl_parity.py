"""BFCL parity: arborl's score equals bfcl-eval's runner, item by item (bfcl_parity.py says
how the outputs are made and scored). CI runs the first entry of every single-turn category
and three of every multi-turn one (~180 outputs), and the first five Java and JavaScript
entries; `-m full` runs seven of each category, and Java and JavaScript whole."""

from __future__ import annotations

import pytest
from bfcl_parity import compare

LANGUAGE_CATEGORIES = ("simple_java", "simple_javascript")
#: What a Java/JS parity set must hold: gold, each perturbation, and a JSON non-string value.
LANGUAGE_KINDS = {
    "gold",
    "abstain",
    "wrong_value",
    "missing_arg",
    "extra_call",
    "unknown_function",
    "non_string",
}


def _check(
    per_category: int | None,
    at_least: int,
    multi_turn: int | None = None,
    categories: tuple[str, ...] | None = None,
    kinds_needed: set[str] | None = None,
) -> None:
    rows, kinds = compare(per_category, multi_turn, categories)
    mismatches = [r for r in rows if r[2] != r[3]]
    assert not mismatches, f"{len(mismatches)} of {len(rows)} outputs scored differently: {mismatches[:10]}"
    assert len(rows) >= at_least
    # the set must hold both verdicts of the perturbations, or agreement would prove little
    assert {True, False} <= {r[2] for r in rows}
    assert (kinds_needed or set()) <= set(kinds), kinds
    if categories is None:
        assert {
            "gold",
            "wrong_value",
            "missing_arg",
            "extra_call",
            "wrong_order",
            "dropped_call",
            "state_ahead",
            "call",
            "non_string",
        } <= set(kinds)


def test_parity_on_a_sample_of_every_category() -> None:
    # three multi-turn entries each: the first alone has no run whose only fault is the state
    _check(1, 100, multi_turn=3)


def test_parity_on_java_and_javascript_sample() -> None:
    _check(5, 60, categories=LANGUAGE_CATEGORIES, kinds_needed=LANGUAGE_KINDS)


@pytest.mark.full
def test_parity_on_500_outputs() -> None:
    _check(7, 500)


@pytest.mark.full
def test_parity_on_every_java_and_javascript_entry() -> None:
    _check(None, 900, categories=LANGUAGE_CATEGORIES, kinds_needed=LANGUAGE_KINDS)
