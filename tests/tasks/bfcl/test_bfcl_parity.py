"""BFCL parity: arborl's score equals bfcl-eval's runner, item by item (bfcl_parity.py says
how the outputs are made and scored). CI runs the first entry of every offline category
(~90 outputs); `-m slow` runs seven (~600 outputs, multi-turn included)."""

from __future__ import annotations

import pytest
from bfcl_parity import compare


def _check(per_category: int, at_least: int) -> None:
    rows, kinds = compare(per_category)
    mismatches = [r for r in rows if r[2] != r[3]]
    assert not mismatches, f"{len(mismatches)} of {len(rows)} outputs scored differently: {mismatches[:10]}"
    assert len(rows) >= at_least
    # the set must hold both verdicts of the perturbations, or agreement would prove little
    assert {True, False} <= {r[2] for r in rows}
    assert {"gold", "wrong_value", "missing_arg", "extra_call", "wrong_order", "dropped_call", "call"} <= set(
        kinds
    )


def test_parity_on_a_sample_of_every_category() -> None:
    _check(1, 80)


@pytest.mark.slow
def test_parity_on_500_outputs() -> None:
    _check(7, 500)
