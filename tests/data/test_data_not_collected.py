"""The example task folders under tests/data hold their own tests, meant for their task's
sandbox: on the host they fail (no /app), so the suite must never collect them. A new
example folder that conftest.py's `collect_ignore_glob` misses fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_no_example_tasks_own_test_is_collected():
    examples = sorted(p.relative_to(HERE) for p in HERE.glob("*/*/tests/test_*.py"))
    assert examples, "no example task's tests found: the check would prove nothing"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(HERE)],
        capture_output=True,
        text=True,
        cwd=HERE.parents[1],
    ).stdout
    collected = [line for line in out.splitlines() if "::" in line]
    assert collected == [f"tests/data/{Path(__file__).name}::test_no_example_tasks_own_test_is_collected"], out
