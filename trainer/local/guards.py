"""Run guards: rules that stop a run whose training has gone wrong, saying why and what to change.

The entropy guard watches the policy's mean token entropy (``actor/entropy``, logged by every
RL step that updates the policy). An entropy that climbs towards ``ln |V|`` (every token about
as likely as any other) is a policy dissolving into noise: its rollouts stop scoring and later
steps only spend compute. The rule, over the RL steps that logged an entropy ``H_1, H_2, ...``::

    baseline  b = mean(H_1 .. H_k)                          k = baseline_steps
    step t is high  ⇔  H_t > max(factor · b, min_entropy)   (relative rule, once t > k)
                   or  H_t > max_entropy                    (absolute bound)
    stop at t  ⇔  steps t−patience+1 .. t are all high

`patience` consecutive high steps, not one: a single noisy batch (a few long, unsure replies)
lifts the mean for one step and falls back. The defaults only catch a real explosion: in the
learning benchmark's runs (bench/results/learning-*-runs) entropies rose to 2–5x their first
steps' and came back, while the runs that dissolved went to 6–7 nats (ln 2048 = 7.6) from 1.

    guard = EntropyGuard(EntropyGuardConfig())
    reason = guard.replay(logged_rl_events)       # a resumed run: the history so far
    reason = guard.observe(step, metrics.get("actor/entropy"))   # None: go on
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

OPTION = "run.entropy_guard"


class EntropyGuardConfig(BaseModel):
    """When an exploding entropy stops the run (`run.entropy_guard`)."""

    model_config = ConfigDict(extra="forbid")

    factor: float | None = Field(
        5.0,
        gt=1,
        description="a step is high when its entropy exceeds this times the mean of the first "
        "baseline_steps RL steps' (null: no relative rule)",
    )
    baseline_steps: int = Field(5, ge=1, description="RL steps (with an update) the baseline is the mean of")
    min_entropy: float = Field(
        1.0,
        ge=0,
        description="nats; the relative rule ignores entropies at or below this (a near-deterministic "
        "policy may multiply a tiny entropy harmlessly)",
    )
    max_entropy: float | None = Field(
        None, gt=0, description="nats; a step above it is high whatever the baseline (null: no bound)"
    )
    patience: int = Field(5, ge=1, description="high steps in a row that stop the run")

    @property
    def enabled(self) -> bool:
        return self.factor is not None or self.max_entropy is not None


class EntropyGuard:
    """Applies `EntropyGuardConfig`'s rule to the entropies of successive RL steps."""

    def __init__(self, config: EntropyGuardConfig, option: str = OPTION) -> None:
        self.config, self.option = config, option
        self.first: list[float] = []  # the baseline's entropies
        self.high: list[tuple[int, float]] = []  # the current run of high steps (step, entropy)

    @property
    def baseline(self) -> float | None:
        """Mean entropy of the first `baseline_steps` steps (None until there are that many)."""
        k = self.config.baseline_steps
        return statistics.mean(self.first) if len(self.first) >= k else None

    def threshold(self) -> float | None:
        """The entropy a step must exceed to be high (None: no rule applies yet)."""
        cfg, limits = self.config, []
        if cfg.factor is not None and self.baseline is not None:
            limits.append(max(cfg.factor * self.baseline, cfg.min_entropy))
        if cfg.max_entropy is not None:
            limits.append(cfg.max_entropy)
        return min(limits) if limits else None

    def observe(self, step: int, entropy: float | None) -> str | None:
        """Take step `step`'s entropy (None: the step did not update the policy, which neither
        counts nor breaks a run of high steps); the reason to stop, or None."""
        if entropy is None or not self.config.enabled:
            return None
        limit = self.threshold()
        finite = math.isfinite(entropy)
        if finite and len(self.first) < self.config.baseline_steps:
            self.first.append(entropy)
        if limit is None or (finite and entropy <= limit):  # a NaN entropy is high too
            self.high.clear()
            return None
        self.high.append((step, entropy))
        return self.reason(limit) if len(self.high) >= self.config.patience else None

    def replay(self, events: Iterable[Mapping[str, Any]]) -> str | None:
        """Observe a resumed run's logged RL steps in order; the reason to stop if they end
        with enough high steps (the guard stopped it, and nothing was changed)."""
        reason = None
        for e in events:
            reason = self.observe(int(e["step"]), e.get("actor/entropy"))
        return reason

    def reason(self, limit: float) -> str:
        cfg, (first, _), (last, entropy) = self.config, self.high[0], self.high[-1]
        base = self.baseline
        why = []
        if cfg.factor is not None and base is not None:
            why.append(f"{cfg.factor:g} x the first {cfg.baseline_steps} steps' mean {base:.2f}")
        if cfg.max_entropy is not None:
            why.append(f"the bound {cfg.max_entropy:g}")
        return (
            f"the policy's entropy exploded: actor/entropy {entropy:.2f} nats at RL step {last}, "
            f"above {limit:.2f} ({' or '.join(why)}) for {len(self.high)} steps in a row "
            f"(steps {first}-{last}). The run stops here, its checkpoint kept. To go on, resume "
            f"with a larger {self.option}.factor, {self.option}.max_entropy or {self.option}.patience "
            f"(null factor and max_entropy: no guard); to keep it from exploding, lower learner.lr "
            "or turn on learner.use_kl_loss"
        )
