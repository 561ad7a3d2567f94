"""Skip-or-fail for components a test needs (imported by test modules as `arborl_require`).

Its own module, not conftest: several conftest.py files exist, and `from conftest import`
gets whichever one pytest imported first.
"""

from __future__ import annotations

import os

import pytest

REQUIRED = {x.strip() for x in os.environ.get("ARBORL_REQUIRE", "").split(",") if x.strip()}


def unavailable(component: str, reason: str) -> None:
    """Skip, or fail when CI requires the component (named in ARBORL_REQUIRE)."""
    if component in REQUIRED:
        pytest.fail(f"{component} is required (ARBORL_REQUIRE) but unavailable: {reason}")
    pytest.skip(f"{component} unavailable: {reason}")
