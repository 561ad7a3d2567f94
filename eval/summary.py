"""Evaluation metrics: resolved rate, pass@k, turns, tokens, tool errors, wall time.

Every rate is over all samples of all instances, as SWE-bench reports resolved over every
instance: a sample that errored (the environment, the infrastructure, a timeout, an agent
that crashed its sandbox) is unresolved, and the headline says how many of each there
were, the benchmark's own kinds of failure (its hook's `unresolved_kinds`) included.

pass@k is the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models
Trained on Code", eq. 1): with n samples of a problem of which c are correct,

    pass@k = 1 - C(n - c, k) / C(n, k)

averaged over problems, computed as their numerically stable product form.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from arborl.envs.benchmarks import Grade

from .result_store import FINAL, InstanceResult


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


#: Why a sample is unresolved, in the order headlines list them: (singular, plural) labels.
#: A benchmark's own kinds (its hook's `unresolved_kinds`: graded failures it tells apart)
#: are listed right after "failed", before the errors (`kind_labels`).
UNRESOLVED_KINDS: dict[str, tuple[str, str]] = {
    "failed": ("failed", "failed"),  # graded (or scored by its env) and not resolved
    "agent_crash": ("agent crash", "agent crashes"),  # the agent's actions killed its sandbox
    "timeout": ("timeout", "timeouts"),
    "error": ("harness error", "harness errors"),  # the env, grader or policy factory raised
    "infrastructure": ("infrastructure error", "infrastructure errors"),
    "environment": ("environment error", "environment errors"),
}
_KIND_OF_STATUS = {
    "agent_crash": "agent_crash",
    "timeout": "timeout",
    "error": "error",
    "infra_error": "infrastructure",
    "env_error": "environment",
}


def grade_details(grade: Grade, kinds: Mapping[str, tuple[str, str]]) -> dict[str, Any]:
    """What a stored result keeps of `grade`: the hook's details and, under keys of their own,
    the grade's error (`grade_error`), its unresolved kind with the kind's labels (`unresolved`,
    so that a stored run reads without its benchmark) and why (`why`, `why_text`). `kinds`:
    the hook's `unresolved_kinds`, which must name the grade's kind."""
    out = dict(grade.details)
    if grade.error:
        out["grade_error"] = grade.error
    kind = grade.unresolved_kind
    if kind and not grade.success:
        if kind not in kinds:
            raise ValueError(
                f"the grade's unresolved_kind {kind!r} is not one its benchmark hook declares in "
                f"unresolved_kinds ({sorted(kinds)}): add it there, with its labels"
            )
        out["unresolved"] = {"kind": kind, "label": list(kinds[kind])}
    if grade.why:
        out["why"] = grade.why
    if grade.why_text:
        out["why_text"] = grade.why_text
    return out


def unresolved_kind(r: InstanceResult) -> str | None:
    """The kind of an unresolved result (a key of `UNRESOLVED_KINDS`, or its benchmark's own);
    None for a resolved one."""
    if r.success:
        return None
    if r.status in _KIND_OF_STATUS:
        return _KIND_OF_STATUS[r.status]
    return benchmark_kind(r) or "failed"


def benchmark_kind(r: InstanceResult) -> str | None:
    """The benchmark's own kind of a graded, unresolved result (`Grade.unresolved_kind`), if any."""
    stored = r.details.get("unresolved")
    kind = stored.get("kind") if isinstance(stored, dict) else None
    return str(kind) if kind else None


def grade_error(r: InstanceResult) -> str | None:
    """The grade's error (`Grade.error`), if any."""
    error = r.details.get("grade_error")
    if not error:  # stored before grades had an error of their own: the hook's grade record's
        record = r.details.get("grade")
        error = record.get("error") if isinstance(record, dict) else None
    return str(error) if error else None


def kind_labels(
    *declared: Mapping[str, Sequence[str]], results: Iterable[InstanceResult] = ()
) -> dict[str, tuple[str, str]]:
    """Every unresolved kind with its labels, in headline order: "failed", the benchmarks' own
    (as `declared`, then any other a stored result names, by name), then the errors."""
    own: dict[str, tuple[str, str]] = {}
    for kinds in declared:
        for kind, (one, many) in kinds.items():
            if kind not in UNRESOLVED_KINDS:
                own.setdefault(kind, (one, many))
    found: dict[str, tuple[str, str]] = {}
    for r in results:
        kind = benchmark_kind(r)
        if kind and kind not in own and kind not in UNRESOLVED_KINDS:
            label = r.details["unresolved"].get("label") or (kind, kind)
            found[kind] = (str(label[0]), str(label[-1]))
    own.update(sorted(found.items()))
    failed, *errors = UNRESOLVED_KINDS.items()
    return dict([failed, *own.items(), *errors])


def count_phrase(counts: Mapping[str, int], labels: Mapping[str, Sequence[str]] = UNRESOLVED_KINDS) -> str:
    """`{"failed": 1, "environment": 2}` -> "1 failed, 2 environment errors" (zeros left out)."""
    parts = []
    for kind, n in counts.items():
        if n:
            one, many = labels.get(kind, (kind, kind))
            parts.append(f"{n} {one if n == 1 else many}")
    return ", ".join(parts)


def headline(
    resolved: int,
    samples: int,
    by_kind: Mapping[str, int],
    labels: Mapping[str, Sequence[str]] = UNRESOLVED_KINDS,
) -> str:
    """The headline over every sample, e.g. `resolved 2/3 (66.7%) · unresolved 1: 1 environment error`."""
    rate = resolved / samples if samples else 0.0
    out = f"resolved {resolved}/{samples} ({rate:.1%})"
    if samples - resolved:
        out += f" · unresolved {samples - resolved}: {count_phrase(by_kind, labels)}"
    return out


def summarize(
    results: Sequence[InstanceResult],
    ks: Sequence[int] = (1,),
    kinds: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """Headline numbers of a run's results: rates are over every sample of every instance, an
    error of any kind (the agent's, the harness's, the infrastructure's, the environment's) is
    an unresolved sample, broken out by kind (`kinds`: the benchmark's own, with their labels,
    counted even when none occurred). Means of turns, tokens and wall time are over the
    `episodes` that came to a result (final statuses)."""
    final = [r for r in results if r.status in FINAL]
    by_instance: dict[str, list[InstanceResult]] = defaultdict(list)
    for r in results:
        by_instance[r.instance_id].append(r)
    n = len(results)
    resolved = sum(r.success for r in results)
    calls = sum(r.tool_calls for r in final)
    counts = [(len(rs), sum(r.success for r in rs)) for rs in by_instance.values()]
    max_n = max((c[0] for c in counts), default=0)
    wall = [r.wall_s for r in final]
    labels = kind_labels(kinds or {}, results=results)
    counted = Counter(unresolved_kind(r) for r in results)
    by_kind = {k: counted.get(k, 0) for k in labels}
    out: dict[str, Any] = {
        "headline": headline(resolved, n, by_kind, labels),
        "instances": len(by_instance),
        "samples": n,
        "resolved": resolved,
        "resolved_rate": resolved / n if n else 0.0,
        "unresolved": n - resolved,
        "unresolved_by_kind": by_kind,
        "unresolved_kinds": {k: list(v) for k, v in labels.items()},  # the labels, in headline order
        "mean_score": (sum(r.score for r in results) / n) if n else 0.0,
        "pass_at_k": {k: mean_pass_at_k(counts, k) for k in sorted({*ks, max_n} - {0}) if k <= max_n},
        "episodes": len(final),
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
        "grades": dict(Counter(r.grade for r in final if r.grade)),  # verdict words (Grade.label)
        # the error's code: "<code>: <what went wrong>" counts as <code>
        "grade_errors": dict(Counter(e.split(":")[0] for r in final if (e := grade_error(r)))),
        "errors": sum(r.status != "done" for r in final),
        "infra_errors": by_kind["infrastructure"],
        "env_errors": by_kind["environment"],
        "agent_crashes": by_kind["agent_crash"],
        "retried": sum(r.attempts > 1 for r in results),
    }
    return out
