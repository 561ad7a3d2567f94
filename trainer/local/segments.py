"""Advantages for a batch whose episodes may be several segments each.

An episode whose context changed (the agent's sliding window or summary, a gateway harness
that rewrote its history) is several trajectories, its segments, sharing an `episode_id`.
Groups are over episodes: credit is assigned on one row per episode (`episode_view`: its
segments' turns in order), so GRPO counts an episode once however many segments it has and
a turn-level estimator sees the episode's whole sequence of turns. Each turn's advantages
are then copied onto the same turn in the segment that sampled it, and every segment is
trained: a segment of an episode with outcome advantage A gets A on each of its sampled
tokens. A batch without multi-segment episodes is credited exactly as before, row by row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from arborl.agents import Trajectory
from arborl.agents.credit import compute_advantages
from arborl.agents.trajectory import episode_view, episodes_of
from arborl.trainer.dataproto import RopeIndex, trajectories_to_dataproto


def credited_batch(
    trajs: Sequence[Trajectory],
    pad_token_id: int,
    estimator: str,
    *,
    rope_index: RopeIndex | None = None,
    **options: Any,
) -> Any:
    """`trajs` as a DataProto with ``advantages`` from `estimator`, assigned per episode
    (`rope_index`: a vision-language policy's positions, for trajectories with images)."""
    data = trajectories_to_dataproto(trajs, pad_token_id, rope_index=rope_index)
    episodes = episodes_of(trajs)
    if all(len(e) == 1 for e in episodes):
        adv, _ = compute_advantages(data, estimator, **options)
    else:
        views = [episode_view([trajs[i] for i in e]) for e in episodes]
        view_data = trajectories_to_dataproto(views, pad_token_id, rope_index=rope_index)
        view_adv, _ = compute_advantages(view_data, estimator, **options)
        adv = torch.zeros_like(data.batch["response_mask"], dtype=view_adv.dtype)
        for v, (view, rows) in enumerate(zip(views, episodes, strict=True)):
            spans = iter(_response_spans(view))
            for row in rows:
                for a, b in _response_spans(trajs[row]):
                    va, vb = next(spans)
                    adv[row, a:b] = view_adv[v, va:vb]
    data.batch["advantages"] = adv
    return data


def _response_spans(t: Trajectory) -> list[tuple[int, int]]:
    """Each turn's sampled tokens as [start, end) within the row's response columns."""
    start = len(t.prompt_ids)
    return [(a - start, b - start) for a, b in t.turn_spans()]
