"""A verifier that scores an answer 1 or 0 by a hash of its text: half the answers of any
model pass, so a random model's episodes both succeed and fail. The verl smoke test swaps it
into tool-mini tasks (`"verifier": "coin_verifier:coin"`) to get groups with mixed outcomes
without training a model first. Imported by module path in Ray workers (PYTHONPATH=tests/trainer)."""

from __future__ import annotations

import hashlib
from typing import Any


def coin(answer: str, task: Any) -> float:
    return float(hashlib.sha256(f"{task.id}:{answer}".encode()).digest()[0] % 2)
