"""Evaluation metrics: resolved rate, pass@k, turns, tokens, tool errors, wall time.

pass@k is the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models
Trained on Code", eq. 1): with n samples of a problem of which c are correct,

    pass@k = 1 - C(n - c, k) / C(n, k)

averaged over problems, computed as their numerically stable product form.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from .store import FINAL, InstanceResult


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn from n (c of them correct) is correct."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    # 1 - prod_{i=n-c+1}^{n} (1 - k / i)  ==  1 - C(n-c, k) / C(n, k)
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mean_pass_at_k(per_instance: Iterable[tuple[int, int]], k: int) -> float | None:
    """Mean pass@k over instances given as (n, c); instances with n < k are left out."""
    values = [pass_at_k(n, c, k) for n, c in per_instance if n >= k]
    return sum(values) / len(values) if values else None


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(results: Sequence[InstanceResult], ks: Sequence[int] = (1,)) -> dict[str, Any]:
    """Headline numbers of a run's final results (infra errors are reported, not scored)."""
    final = [r for r in results if r.status in FINAL]
    by_instance: dict[str, list[InstanceResult]] = defaultdict(list)
    for r in final:
        by_instance[r.instance_id].append(r)
    n = len(final)
    calls = sum(r.tool_calls for r in final)
    counts = [(len(rs), sum(r.success for r in rs)) for rs in by_instance.values()]
    max_n = max((c[0] for c in counts), default=0)
    wall = [r.wall_s for r in final]
    out: dict[str, Any] = {
        "instances": len(by_instance),
        "samples": n,
        "resolved": sum(r.success for r in final),
        "resolved_rate": (sum(r.success for r in final) / n) if n else 0.0,
        "mean_score": (sum(r.score for r in final) / n) if n else 0.0,
        "pass_at_k": {k: mean_pass_at_k(counts, k) for k in sorted({*ks, max_n} - {0}) if k <= max_n},
        "turns_mean": statistics.fmean([r.turns for r in final]) if final else 0.0,
        "prompt_tokens_mean": statistics.fmean([r.prompt_tokens for r in final]) if final else 0.0,
        "response_tokens_mean": statistics.fmean([r.response_tokens for r in final]) if final else 0.0,
        "tokens_exact": bool(final) and all(r.tokens_exact for r in final),
        "tool_calls": calls,
        "tool_error_rate": (sum(r.tool_errors for r in final) / calls) if calls else 0.0,
        "wall_s_mean": statistics.fmean(wall) if wall else 0.0,
        "wall_s_p50": _percentile(wall, 0.5),
        "wall_s_p90": _percentile(wall, 0.9),
        "statuses": dict(Counter(r.status for r in results)),
        "grades": dict(Counter(r.grade for r in final if r.grade)),
        "errors": sum(r.status != "done" for r in final),
        "infra_errors": sum(r.status == "infra_error" for r in results),
        "env_errors": sum(r.status == "env_error" for r in results),
        "retried": sum(r.attempts > 1 for r in results),
        "patch_apply_failures": sum(
            r.details.get("grade", {}).get("error") == "patch_apply_failed" for r in final
        ),
    }
    return out
