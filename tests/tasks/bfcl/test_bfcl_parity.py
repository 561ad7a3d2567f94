"""BFCL parity: arborl's score equals bfcl-eval's runner, item by item (bfcl_parity.py says
how the outputs are made and scored). CI runs the first entry of every single-turn category
and three of every multi-turn one (~150 outputs); `-m slow` runs seven of each (over 600)."""

from __future__ import annotations

import pytest
from bfcl_parity import compare


def _check(per_category: int, at_least: int, multi_turn: int | None = None) -> None:
    rows, kinds = compare(per_category, multi_turn)
    mismatches = [r for r in rows if r[2] != r[3]]
    assert not mismatches, f"{len(mismatches)} of {len(rows)} outputs scored differently: {mismatches[:10]}"
    assert len(rows) >= at_least
    # the set must hold both verdicts of the perturbations, or agreement would prove little
    assert {True, False} <= {r[2] for r in rows}
    assert {
        "gold",
        "wrong_value",
        "missing_arg",
        "extra_call",
        "wrong_order",
        "dropped_call",
        "state_ahead",
        "call",
    } <= set(kinds)


def test_parity_on_a_sample_of_every_category() -> None:
    # three multi-turn entries each: the first alone has no run whose only fault is the state
    _check(1, 100, multi_turn=3)


@pytest.mark.full
def test_parity_on_500_outputs() -> None:
    _check(7, 500)
