"""Planning a run's phases inside `run.time_budget_min`.

A run is a warm start (SFT steps, with held-out evaluations every `sft.eval_every`), then RL.
Checking the budget only inside the RL loop, against the time since the run began, lets a
slow machine spend all of it on the warm start: on a CPU where a warm-start step took 1.25 s
instead of 0.54 s, `make run` ran 0 of its 200 RL steps and said nothing. So each phase is
sized from its own measured step time, early, and what was cut is said (stdout, the
`budget` events of metrics.jsonl, summary.json):

    budget ─┬─ warm start: (1 - rl_share) of the budget, less the time already spent
            │     after `probe` steps, and again every `REPLAN_EVERY` steps from the mean
            │     step time so far: kept = done + (its time left - evaluations left) / step time
            └─ RL: what is left at its start (at least rl_share of the budget, if the warm
                   start kept to its share), after `probe` steps:
                   kept = done + (time left - final evaluation) / step time

A phase is never lengthened past its configured steps, and never cut below the steps it has
already done. With no budget every plan keeps the configured steps. `PhaseBudget` and
`steps_that_fit` are the arithmetic; a `Pacer` times one phase's steps and says when to plan
it and whether a new plan replaces the last one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple

REPLAN_EVERY = 50  # warm-start steps between two plans of its length


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

    @classmethod
    def from_minutes(cls, minutes: float | None, rl_share: float = 0.25) -> PhaseBudget:
        """`run.time_budget_min` in seconds (None or 0: no budget)."""
        return cls(minutes * 60 if minutes else None, rl_share=rl_share)

    def spent(self, elapsed_s: float) -> bool:
        """Whether a run `elapsed_s` seconds long has used up the budget."""
        return self.budget_s is not None and elapsed_s >= self.budget_s

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


class Plan(NamedTuple):
    """A plan a phase takes: its cut, and whether to say it (it moved enough since last said)."""

    cut: Cut
    say: bool


class Pacer:
    """Times one phase's steps and plans its length inside the run's budget.

    The phase calls `before(step)` ahead of each step (numbered on from `first`, the steps done
    before the phase began) and `evaluated(seconds)` after each evaluation inside it, which is
    then left out of the step time and is what the next plan expects an evaluation to take.
    The step time is measured from the phase's second step (the first warms up). After `probe`
    steps, and again every `replan_every` steps if set, the phase is planned; a later plan is
    taken only when it moves the phase's length by a fiftieth (at least 5 steps), and said
    again only when it moved by a tenth since last said."""

    def __init__(
        self,
        budget: PhaseBudget,
        phase: Literal["sft", "rl"],
        *,
        planned: int,
        first: int,
        eval_every: int | None,
        eval_s: float,
        elapsed: Callable[[], float],
        replan_every: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.budget, self.phase, self.planned, self.first = budget, phase, planned, first
        self.eval_every, self.eval_s, self.elapsed = eval_every, eval_s, elapsed
        self.replan_every, self.clock = replan_every, clock
        self.target = self.said = planned  # the phase's length: as planned now, as last said
        self._start, self._evals_s = clock(), 0.0

    def out_of_time(self) -> bool:
        return self.budget.spent(self.elapsed())

    def evaluated(self, seconds: float) -> None:
        self.eval_s = seconds  # the latest: evaluations grow with the policy
        self._evals_s += seconds

    def before(self, step: int) -> Plan | None:
        """The plan to take before `step`, if one is due and moves the phase's length."""
        if step == self.first + 2:  # the first step warmed up: timed from here
            self._start, self._evals_s = self.clock(), 0.0
        done = step - 1
        since = done - self.first - self.budget.probe
        due = since == 0 or (since > 0 and self.replan_every is not None and since % self.replan_every == 0)
        if self.budget.budget_s is None or not due:
            return None
        cut = self._plan(done)
        if since > 0 and abs(cut.kept - self.target) < max(5, self.target // 50):
            return None
        say = since == 0 or abs(cut.kept - self.said) >= self.said / 10
        self.target, self.said = cut.kept, cut.kept if say else self.said
        return Plan(cut, say)

    def _plan(self, done: int) -> Cut:
        """Planned from the mean step time so far: the first steps can run faster than the
        rest, and a plan from them alone takes RL's share (docs/trainer.md, time budget)."""
        step_s = (self.clock() - self._start - self._evals_s) / (done - self.first - 1)
        plan = self.budget.plan_sft if self.phase == "sft" else self.budget.plan_rl
        return plan(
            planned=self.planned,
            done=done,
            step_s=step_s,
            elapsed_s=self.elapsed(),
            eval_every=self.eval_every,
            eval_s=self.eval_s,
        )
