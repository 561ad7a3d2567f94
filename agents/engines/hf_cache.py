"""The decode batch's KV cache layer: appends in place into spare columns.

transformers' `DynamicLayer` concatenates the whole cache with the new column at every
decode step, a full copy of the batch's keys and values per layer and step (a fifth of a
decode step of the tiny model on CPU, 64 rows on a 420-token cache). `RoomyLayer` keeps its
keys and values as the first columns of buffers with `ROOM` spare columns, so a step writes
one column and copies nothing; only when the room runs out is the cache copied into larger
buffers. The views it hands out never change: later writes go past their end.
`stack_left` lays left-padded caches side by side into one batch.

Imported by the transformers engine's decode loop (it needs transformers, which
`arborl.agents.engines` does not import until an engine is made).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

_Kv = list[tuple[torch.Tensor, torch.Tensor]]  # a KV cache's keys and values, per layer

ROOM = 64  # spare columns: one buffer copy per ROOM decode steps at most


def roomy(t: torch.Tensor, width: int) -> torch.Tensor:
    """A ``[b, heads, width + ROOM, dim]`` buffer whose first columns hold `t`."""
    b, heads, w, dim = t.shape
    buf = t.new_empty((b, heads, width + ROOM, dim))
    buf[:, :, :w] = t
    return buf


class RoomyLayer(DynamicLayer):
    """A `DynamicLayer` over buffers with spare columns (``keys = kbuf[:, :, :width]``)."""

    def __init__(self, kbuf: torch.Tensor, vbuf: torch.Tensor, width: int) -> None:
        super().__init__()
        self.lazy_initialization(kbuf, vbuf)
        self.bufs = (kbuf, vbuf)
        self.keys, self.values = kbuf[:, :, :width], vbuf[:, :, :width]

    @classmethod
    def of(cls, keys: torch.Tensor, values: torch.Tensor) -> RoomyLayer:
        """A layer holding copies of `keys` and `values` with room after them."""
        w = keys.shape[2]
        return cls(roomy(keys, w), roomy(values, w), w)

    @classmethod
    def gather(cls, keys: torch.Tensor, values: torch.Tensor, rows: torch.Tensor, first: int) -> RoomyLayer:
        """A layer of `rows` of the cache from column `first` on, gathered straight into
        buffers with room (one copy)."""
        w = keys.shape[2] - first
        bufs = []
        for t in (keys, values):
            buf = t.new_empty((len(rows), t.shape[1], w + ROOM, t.shape[3]))
            torch.index_select(t[:, :, first:], 0, rows, out=buf[:, :, :w])
            bufs.append(buf)
        return cls(bufs[0], bufs[1], w)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n, add = self.keys.shape[2], key_states.shape[2]
        if n + add > self.bufs[0].shape[2]:
            self.bufs = (roomy(self.keys, n + add), roomy(self.values, n + add))
        for buf, new in zip(self.bufs, (key_states, value_states), strict=True):
            buf[:, :, n : n + add] = new
        self.keys, self.values = self.bufs[0][:, :, : n + add], self.bufs[1][:, :, : n + add]
        return self.keys, self.values


def stack_left(kvs: list[_Kv], masks: list[torch.Tensor]) -> tuple[_Kv, torch.Tensor]:
    """Left-padded batches (per-layer KV ``[b, heads, w, dim]``, mask ``[b, w]``) stacked
    into one, each padded on the left to the widest."""
    width = max(m.shape[1] for m in masks)

    def stack(layer: int, j: int) -> torch.Tensor:  # j: 0 keys, 1 values
        return torch.cat([pad_left(part[layer][j], width, 2) for part in kvs])

    kv = [(stack(layer, 0), stack(layer, 1)) for layer in range(len(kvs[0]))]
    return kv, torch.cat([pad_left(m, width, 1) for m in masks])


def pad_left(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    missing = width - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)
