"""Latency recording with percentiles (numpy does the maths)."""

from __future__ import annotations

from collections import defaultdict, deque

import numpy as np


class LatencyStats:
    """Keeps the last `window` samples per name; `summary()` gives count/mean/p50/p99 in ms."""

    def __init__(self, window: int = 10_000) -> None:
        self._samples: defaultdict[str, deque[float]] = defaultdict(lambda: deque(maxlen=window))
        self.counts: defaultdict[str, int] = defaultdict(int)

    def record(self, name: str, seconds: float) -> None:
        self._samples[name].append(seconds)
        self.counts[name] += 1

    def count(self, name: str) -> int:
        return self.counts[name]

    def summary(self) -> dict[str, dict[str, float]]:
        out = {}
        for name, samples in self._samples.items():
            arr = np.fromiter(samples, dtype=np.float64) * 1e3
            out[name] = {
                "count": float(self.counts[name]),
                "mean_ms": float(arr.mean()) if arr.size else 0.0,
                "p50_ms": float(np.percentile(arr, 50)) if arr.size else 0.0,
                "p99_ms": float(np.percentile(arr, 99)) if arr.size else 0.0,
            }
        return out
