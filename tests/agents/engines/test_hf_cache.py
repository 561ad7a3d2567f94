"""`RoomyLayer`, the decode batch's KV cache layer: appends in place into spare columns and
copies only when the room runs out; what it returns equals concatenation, and a view handed
out earlier never changes."""

from __future__ import annotations

import torch

from arborl.agents.engines.hf_cache import ROOM, RoomyLayer


def kv(b: int, w: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, 2, w, 4, generator=g), torch.randn(b, 2, w, 4, generator=g)


def test_appends_equal_concatenation_across_reallocations_and_old_views_stay():
    keys, values = kv(3, 5, 0)
    layer = RoomyLayer.of(keys, values)
    buffers, views = {id(layer.bufs[0])}, []
    for step in range(2 * ROOM + 3):
        k, v = kv(3, 1 + step % 2, step + 1)  # one column, or two
        out_k, out_v = layer.update(k, v)
        keys, values = torch.cat([keys, k], 2), torch.cat([values, v], 2)
        assert torch.equal(out_k, keys) and torch.equal(out_v, values)
        views.append((out_k, keys.clone()))
        buffers.add(id(layer.bufs[0]))
    assert 2 < len(buffers) < 8  # reallocated only when the room ran out
    for view, expected in views:
        assert torch.equal(view, expected)
    assert layer.get_seq_length() == keys.shape[2]


def test_gather_takes_rows_from_a_column_on():
    keys, values = kv(5, 9, 3)
    rows = torch.tensor([4, 1])
    layer = RoomyLayer.gather(keys, values, rows, first=3)
    assert torch.equal(layer.keys, keys[rows][:, :, 3:]) and torch.equal(layer.values, values[rows][:, :, 3:])
    assert layer.bufs[0].shape[2] == 6 + ROOM
    k, v = kv(2, 1, 4)
    out_k, _ = layer.update(k, v)
    assert out_k.data_ptr() == layer.bufs[0].data_ptr()  # written in place
    assert torch.equal(out_k, torch.cat([keys[rows][:, :, 3:], k], 2))
