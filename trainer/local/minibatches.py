"""How an update cuts its batch: mini-batches (one optimiser step each) and micro-batches
(one forward/backward each).

    batch ──mini_batches──▶ whole groups, `ppo_mini_batch_size` at a time, in batch order
          ──micro_batches──▶ `micro_batch_size` rows that share a prompt prefix, cut to their extent

A mini-batch never splits a group (verl's `actor.ppo_mini_batch_size` counts prompts); a
micro-batch is an exact piece of the computation (padding costs nothing, `micro_batches`).
A batch with images (``multi_modal_inputs``, `arborl.trainer.dataproto`) gives each
micro-batch its rows' pixels and grids, concatenated in row order by verl's own
`extract_multi_modal_inputs`, and its ``[b, 4, L]`` positions cut like the ids.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from verl.utils.model import extract_multi_modal_inputs

from .prefix import prefix_groups


def mini_batches(data: Any, size: int | None) -> list[np.ndarray]:
    """Row indices of each mini-batch: `size` whole groups (``uid``) at a time, in the order
    the groups first appear (a row without ``uid`` is its own group); None: one mini-batch."""
    n = len(data)
    if size is None:
        return [np.arange(n)]
    uid = data.non_tensor_batch.get("uid")
    keys = [str(u) for u in uid] if uid is not None else [str(i) for i in range(n)]
    rows: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        rows.setdefault(key, []).append(i)
    groups = list(rows.values())
    return [np.concatenate(groups[k : k + size]).astype(np.int64) for k in range(0, len(groups), size)]


def micro_batches(
    data: Any, micro_batch_size: int, share_prefix_min: int
) -> list[tuple[torch.Tensor, dict[str, torch.Tensor]]]:
    """(row indices, tensors) per micro-batch: rows grouped by the prompt prefix they share,
    sorted by length within a group, and each micro-batch cut to its own extent (prompts
    are left-padded, responses right-padded to the batch's longest), so padding costs no
    compute. Exact: padded positions are masked anyway.

        batch   | p p p p r r r . . . |        micro-batch of the shorter rows
                | . . p p r r . . . . |   →    | p p r r . |
                | . p p p r r r r r r |        | p p p r r |

    A micro-batch never mixes rows whose prompts share fewer than `share_prefix_min`
    tokens: one row of another suite (another system prompt) would leave the whole
    micro-batch without a shared prefix to compute once (`prefix.py`).
    """
    b = data.batch
    seq_keys = ("input_ids", "attention_mask", "position_ids")
    resp_keys = ["responses", "response_mask"]
    extra = ("advantages", "old_log_probs", "rollout_log_probs", "ref_log_prob", "is_weights", "pg_mask")
    resp_keys += [k for k in extra if k in b.keys()]  # noqa: SIM118 - a TensorDict
    resp_len = b["responses"].shape[1]
    prompt_len = b["input_ids"].shape[1] - resp_len
    att = b["attention_mask"]
    images = data.non_tensor_batch.get("multi_modal_inputs")
    lengths = att.sum(-1)
    out = []
    for group in prefix_groups(b["input_ids"][:, :prompt_len], att[:, :prompt_len], share_prefix_min):
        order = group[torch.argsort(lengths[group], descending=True, stable=True)]
        for i in range(0, len(order), micro_batch_size):
            idx = order[i : i + micro_batch_size]
            a = att[idx]
            start = int(prompt_len - a[:, :prompt_len].sum(-1).max())  # first prompt column in use
            used = max(1, int(a[:, prompt_len:].sum(-1).max()))  # response columns in use
            # (position_ids may be [b, 4, L]: the columns are the last dimension)
            mb = {k: b[k][idx][..., start : prompt_len + used] for k in seq_keys}
            mb.update({k: b[k][idx][:, :used] for k in resp_keys})
            if images is not None:
                mb.update(micro_batch_images(images, idx, att.device))
            out.append((idx, mb))
    return out


def micro_batch_images(
    images: np.ndarray, idx: torch.Tensor, device: torch.device
) -> dict[str, torch.Tensor]:
    """The ``pixel_values`` and ``image_grid_thw`` of rows `idx`, in that order (what the
    model's forward takes with their ids); {} when none of them has images."""
    rows = extract_multi_modal_inputs(list(images), idx.tolist())
    return {k: rows[k].to(device) for k in ("pixel_values", "image_grid_thw") if k in rows}
