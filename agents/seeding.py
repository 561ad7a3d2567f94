"""The sampling noise of each generation an agent asks for: a seed per call, per episode.

A seeded `SamplingParams` gives each generation a seed of its own, drawn from the config's
seed, the episode's group id, the call's index in the episode and the episode's place in its
group (`GroupPlaces`)::

    seed = h(config seed, group id, call)       then, for place k > 0, h(seed, k)

The engine's seed is per request (vLLM's rule), so passing the config's seed on would give
every turn of every episode the same noise (a policy that is unsure the same way each turn
would then draw the same reply every turn, and every task's sample j the same replies); and
the episodes of a GRPO group, or a tree's branches, share their group id, so without their
place they would all draw the same replies. The place is taken in call order before any
await, so the same seed samples the same episodes however the engine batches.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

from .engines import SamplingParams
from .episode import EpisodeState

#: Groups whose places are remembered: far more groups than are ever in flight.
KEPT_GROUPS = 4096


class GroupPlaces:
    """How many episodes each recent group has started (or forked) so far."""

    def __init__(self) -> None:
        self._started: OrderedDict[str, int] = OrderedDict()  # episodes per group, recent groups

    def take(self, group_id: str) -> int:
        """The next place in group `group_id` (0 for its first episode)."""
        k = self._started.pop(group_id, 0)
        self._started[group_id] = k + 1
        while len(self._started) > KEPT_GROUPS:
            self._started.popitem(last=False)
        return k


def generation_sampling(sampling: SamplingParams, state: EpisodeState, room: int) -> SamplingParams:
    """`sampling` for the episode's next generation: one sample of at most `room` tokens, and,
    when `sampling` is seeded, the seed of this call of this episode (the module's rule)."""
    update: dict[str, Any] = {"n": 1, "max_new_tokens": room}
    seed = sampling.seed
    if seed is not None:
        calls = sum(len(s.turns) for s in state.segments) + len(state.trajectory.turns)
        key = f"{seed}\0{state.trajectory.group_id}\0{calls}".encode()
        update["seed"] = int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "big") >> 1
        if state.place:
            key = f"{update['seed']}\0{state.place}".encode()
            update["seed"] = int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "big") >> 1
    return sampling.model_copy(update=update)
