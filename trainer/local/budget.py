"""Planning a run's phases inside `run.time_budget_min`.

A run is a warm start (SFT steps, with held-out evaluations every `sft.eval_every`), then RL.
Checking the budget only inside the RL loop, against the time since the run began, lets a
slow machine spend all of it on the warm start: on a CPU where a warm-start step took 1.25 s
instead of 0.54 s, `make run` ran 0 of its 200 RL steps and said nothing. So each phase is
sized from its own measured step time, early, and what was cut is said (stdout, the
`budget` events of metrics.jsonl, summary.json):

    budget ─┬─ warm start: (1 - rl_share) of the budget, less the time already spent
            │     after `probe` steps, and again every `loop.REPLAN_EVERY` steps from the mean
            │     step time so far: kept = done + (its time left - evaluations left) / step time
            └─ RL: what is left at its start (at least rl_share of the budget, if the warm
                   start kept to its share), after `probe` steps:
                   kept = done + (time left - final evaluation) / step time

A phase is never lengthened past its configured steps, and never cut below the steps it has
already done. With no budget every plan keeps the configured steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Cut:
    """One phase's plan: what the config asked for and what fits."""

    phase: str  # "sft" or "rl"
    planned: int  # the configured steps
    kept: int  # the steps that fit the budget
    step_s: float  # the measured seconds a step
    left_s: float  # the phase's seconds left when it was planned

    @property
    def shortened(self) -> bool:
        return self.kept < self.planned

    def message(self) -> str:
        name = {"sft": "warm start", "rl": "reinforcement learning"}.get(self.phase, self.phase)
        if not self.shortened:
            return f"time budget: {name} keeps its {self.planned} steps ({self.step_s:.2f} s a step)"
        return (
            f"time budget: {name} shortened to {self.kept} of {self.planned} steps "
            f"({self.step_s:.2f} s a step measured, {self.left_s / 60:.1f} min left for it)"
        )

    def as_metrics(self) -> dict[str, float]:
        return {
            f"budget/{self.phase}_planned": float(self.planned),
            f"budget/{self.phase}_kept": float(self.kept),
            f"budget/{self.phase}_step_s": self.step_s,
            f"budget/{self.phase}_left_s": self.left_s,
        }


def steps_that_fit(*, planned: int, done: int, step_s: float, left_s: float) -> int:
    """Steps of a phase to run in all: the `done` ones plus as many more of `step_s` seconds as
    `left_s` holds, between `done` and `planned`."""
    if not math.isfinite(left_s):
        return planned
    more = int(max(0.0, left_s) // max(step_s, 1e-9))
    return max(done, min(planned, done + more))


@dataclass(frozen=True)
class PhaseBudget:
    """The run's budget and RL's share of it (None: no budget, nothing is cut)."""

    budget_s: float | None
    rl_share: float = 0.25
    probe: int = 5  # steps timed before a phase is planned (the first one is left out: warm-up)

    def plan_sft(
        self,
        *,
        planned: int,
        done: int,
        step_s: float,
        elapsed_s: float,
        eval_every: int | None,
        eval_s: float,
    ) -> Cut:
        """The warm start's steps, measured `step_s` seconds each after `done` of them. Its
        evaluations (every `eval_every` steps, and the final one) take `eval_s` each; it may
        last until (1 - rl_share) of the budget."""
        end = None if self.budget_s is None else (1.0 - self.rl_share) * self.budget_s
        return self._plan("sft", end, planned, done, step_s, elapsed_s, eval_every, eval_s)

    def plan_rl(
        self,
        *,
        planned: int,
        done: int,
        step_s: float,
        elapsed_s: float,
        eval_every: int | None,
        eval_s: float,
    ) -> Cut:
        """RL's steps, measured `step_s` seconds each after `done` of them; its evaluations
        (every `eval_every` steps, and the final one) take `eval_s` each; it may last until
        the end of the budget."""
        return self._plan("rl", self.budget_s, planned, done, step_s, elapsed_s, eval_every, eval_s)

    def _plan(
        self,
        phase: str,
        end_s: float | None,
        planned: int,
        done: int,
        step_s: float,
        elapsed_s: float,
        eval_every: int | None,
        eval_s: float,
    ) -> Cut:
        if end_s is None:
            return Cut(phase, planned, planned, step_s, math.inf)

        def left(last: int) -> float:  # seconds for steps, less the evaluations up to `last`
            evals = 1 + (sum(1 for s in range(done + 1, last) if s % eval_every == 0) if eval_every else 0)
            return end_s - elapsed_s - evals * eval_s

        kept = steps_that_fit(planned=planned, done=done, step_s=step_s, left_s=left(planned))
        if kept < planned:  # the evaluations the cut leaves out give their time back to steps
            kept = steps_that_fit(planned=planned, done=done, step_s=step_s, left_s=left(kept))
        return Cut(phase, planned, kept, step_s, left(kept))
