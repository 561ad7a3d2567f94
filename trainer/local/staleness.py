"""The async staleness bound as it stands now: `async.max_staleness`, lowered while the batches'
effective sample size says the samples are too far off the policy (`async.ess_throttle`).

    bound = StalenessBound(cfg.async_)
    bound.observe(metrics["offpolicy/ess"])    # after each update
    bound.current                              # what `rollout.dispatch_limit` obeys

A batch whose ESS (`off_policy.effective_sample_size`, of the correction's weights) is below
``ess_throttle`` lowers the bound by one (not below 0): from then on rollouts run ahead of the
learner by one version less, so the groups dispatched after it are at most that stale. A batch
whose ESS is at least ``ess_restore`` (default: ``ess_throttle``) raises it by one, never above
``max_staleness``. One step at a time each way, so a single noisy batch moves it by one. A
resumed run replays its logged ESS (`replay`) and so starts at the bound it stopped at.

The bound is the dispatch limit's, not the buffer's: groups already dispatched keep the bound
they were dispatched under (the buffer measures staleness against `max_staleness`, and
down-weights or drops only what exceeds that). Holding them to the lowered bound instead would
waste episodes already sampled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .config import AsyncConfig


class StalenessBound:
    """The staleness bound the rollouts and the buffer obey, moved by the batches' ESS."""

    def __init__(self, config: AsyncConfig) -> None:
        self.config = config
        self.current = config.max_staleness

    @property
    def throttled(self) -> bool:
        """Whether the ESS moves the bound (`async.ess_throttle` is set)."""
        return self.config.ess_throttle is not None

    def observe(self, ess: float | None) -> int:
        """Move the bound after a batch of effective sample size `ess` (None: a step that
        trained on nothing; the bound stays); returns the bound."""
        low = self.config.ess_throttle
        if low is None or ess is None:
            return self.current
        restore = self.config.ess_restore if self.config.ess_restore is not None else low
        if ess < low:
            self.current = max(0, self.current - 1)
        elif ess >= restore:
            self.current = min(self.config.max_staleness, self.current + 1)
        return self.current

    def replay(self, events: Iterable[Mapping[str, Any]]) -> int:
        """Observe a resumed run's logged RL steps in order."""
        for e in events:
            self.observe(e.get("offpolicy/ess"))
        return self.current
