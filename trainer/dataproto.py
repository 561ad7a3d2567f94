"""Trajectories → verl `DataProto`, in the layout verl's own agent loop produces.

    input_ids:       | pad pad p p p | r r r o o o r r | pad pad |
    attention_mask:  |  0   0  1 1 1 | 1 1 1 1 1 1 1 1 |  0   0  |
    prompts:         | pad pad p p p |                           (left-padded)
    responses:                       | r r r o o o r r | pad pad |  (right-padded)
    response_mask:                   | 1 1 1 0 0 0 1 1 |  0   0  |  (loss mask: model tokens)
    rollout_log_probs:               | l l l 0 0 0 l l |  0   0  |  (behaviour log-probs)
    policy_versions:                 | v v v-1-1-1 v v | -1  -1  |  (who sampled each token)
    token_level_scores:              | 0 0 a 0 0 0 0 b |  0   0  |  (each turn's reward on its last
                                                                      token; they sum to the outcome)

`r` are sampled tokens, `o` environment tokens (tool results, delimiters). Everything after the
prompt is the "response", as in verl's multi-turn agent loop, so verl's advantage estimators,
policy losses and `agg_loss` apply to it unchanged. `non_tensor_batch["uid"]` holds the group
id (what GRPO normalises over), plus `traj_id`, `task_id` and, per row, one entry per turn:
`anchor_state_hashes` (the env state each turn was taken from: GiGPO's anchor states),
`anchor_observations` (the text each turn was taken from: GiGPO's similarity grouping),
`next_state_hashes` (the state after each turn), `tree_paths` (each turn's tree node) and
`step_labels` (an oracle's label of each turn, 0.0 where the env gave none: `oracle_step`).

Trajectories with images (a vision-language policy, `arborl.agents.vision`) travel as verl's
multimodal batches do (its agent loop's `_postprocess`, its actors' `extract_multi_modal_inputs`):

    non_tensor_batch["multi_modal_inputs"][i] = {"pixel_values": [patches_i, C*T*P*P] float32,
                                                 "image_grid_thw": [images_i, 3] int64}   ({}: no images)
    position_ids [B, 4, P+R] = | text positions (the mask's, as for text) |
                               | M-RoPE t, h, w rows (`rope_index`: the model's own positions of
                               |   the unpadded sequence, placed on its columns; 0 on padding) |

A micro-batch's rows concatenate their pixels in row order, which is the order of their image
placeholder tokens in ``input_ids``. A batch without images keeps 2-D positions and no
``multi_modal_inputs``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from verl import DataProto
from verl.utils.model import compute_position_id_with_mask

from arborl.agents.trajectory import Trajectory
from arborl.agents.vision import ImageInputs

#: (ids, their images) -> the model's M-RoPE positions ``[3, len(ids)]``: `rope_positions`
#: with the policy (``functools.partial(arborl.agents.vision.rope_positions, model)``)
RopeIndex = Callable[[Sequence[int], ImageInputs | None], Any]


class BatchOverflowError(ValueError):
    """A trajectory is longer than the batch allows; it should have been truncated at rollout."""


def trajectories_to_dataproto(
    trajectories: Sequence[Trajectory],
    pad_token_id: int,
    max_prompt_length: int | None = None,
    max_response_length: int | None = None,
    rope_index: RopeIndex | None = None,
) -> DataProto:
    """Pack trajectories into one DataProto (see the module docstring for the layout).

    Lengths default to the longest prompt / response in the batch; a trajectory longer than
    an explicit limit raises BatchOverflowError instead of being cut silently. Trajectories
    with images need `rope_index`, the policy's positions (a VLM's M-RoPE depends on the
    images' grids, which only the model knows how to lay out).
    """
    if not trajectories:
        raise ValueError("no trajectories to pack")
    images = [t.images() for t in trajectories]
    if any(i is not None for i in images) and rope_index is None:
        raise ValueError(
            "trajectories with images need the policy's M-RoPE positions: pass "
            "rope_index=functools.partial(arborl.agents.vision.rope_positions, model)"
        )
    prompts = [np.asarray(t.prompt_ids, dtype=np.int64) for t in trajectories]
    cols = [_response_columns(t) for t in trajectories]
    p_len = max_prompt_length or max(len(p) for p in prompts)
    r_len = max_response_length or max(len(c[0]) for c in cols)
    n = len(trajectories)

    prompt_ids = torch.full((n, p_len), pad_token_id, dtype=torch.int64)
    prompt_att = torch.zeros((n, p_len), dtype=torch.int64)
    resp = torch.full((n, r_len), pad_token_id, dtype=torch.int64)
    resp_att = torch.zeros((n, r_len), dtype=torch.int64)
    mask = torch.zeros((n, r_len), dtype=torch.int64)
    logp = torch.zeros((n, r_len), dtype=torch.float32)
    versions = torch.full((n, r_len), -1, dtype=torch.int32)
    scores = torch.zeros((n, r_len), dtype=torch.float32)
    for i, (t, p, (ids, m, lp, ver, sc)) in enumerate(zip(trajectories, prompts, cols, strict=True)):
        if len(p) > p_len or len(ids) > r_len:
            raise BatchOverflowError(
                f"trajectory {t.traj_id}: prompt {len(p)} / response {len(ids)} tokens exceed the batch's "
                f"{p_len} / {r_len}; truncate at rollout (token budget) or raise the limits"
            )
        prompt_ids[i, p_len - len(p) :] = torch.from_numpy(p)
        prompt_att[i, p_len - len(p) :] = 1
        k = len(ids)
        resp[i, :k], resp_att[i, :k] = torch.from_numpy(ids), 1
        mask[i, :k], logp[i, :k] = torch.from_numpy(m), torch.from_numpy(lp)
        versions[i, :k], scores[i, :k] = torch.from_numpy(ver), torch.from_numpy(sc)

    attention = torch.cat([prompt_att, resp_att], dim=1)
    positions = compute_position_id_with_mask(attention)
    if rope_index is not None and any(i is not None for i in images):
        positions = _with_mrope(positions, attention, trajectories, images, rope_index)
    tensors = {
        "prompts": prompt_ids,
        "responses": resp,
        "response_mask": mask,
        "input_ids": torch.cat([prompt_ids, resp], dim=1),
        "attention_mask": attention,
        "position_ids": positions,
        "rollout_log_probs": logp,
        "policy_versions": versions,
        "token_level_scores": scores,
    }
    non_tensors = {
        "uid": np.array([t.group_id or t.traj_id for t in trajectories], dtype=object),
        "traj_id": np.array([t.traj_id for t in trajectories], dtype=object),
        "task_id": np.array([t.task_id for t in trajectories], dtype=object),
        **turn_columns(trajectories),
    }
    if positions.dim() == 3:
        non_tensors["multi_modal_inputs"] = _object_rows([_multi_modal_inputs(i) for i in images])
    return DataProto.from_dict(
        tensors=tensors, non_tensors=non_tensors, meta_info={"pad_token_id": pad_token_id}
    )


def turn_columns(trajectories: Sequence[Trajectory]) -> dict[str, np.ndarray]:
    """The per-turn columns of the batch's ``non_tensor_batch`` (one entry per turn per row)."""
    return {
        # Per turn (credit estimators read them, see arborl.agents.credit): the hash of the env
        # state the turn was taken from (GiGPO's anchor states), of the state after it, and the
        # turn's node in its tree (tree estimator).
        "anchor_state_hashes": _object_rows(
            [tuple(turn.anchor_state_hash for turn in t.turns) for t in trajectories]
        ),
        # the text each turn was taken from (GiGPO's similarity grouping of anchors)
        "anchor_observations": _object_rows(
            [tuple(turn.anchor_observation for turn in t.turns) for t in trajectories]
        ),
        "next_state_hashes": _object_rows(
            [tuple(turn.env_state_hash for turn in t.turns) for t in trajectories]
        ),
        # (rows that are not tree leaves get node ids of their own: they share no prefix)
        "tree_paths": _object_rows(
            [
                tuple(t.tree_path) if t.tree_path else tuple((t.traj_id, k) for k in range(len(t.turns)))
                for t in trajectories
            ]
        ),
        # +1 / -1 where the env labelled the turn right / wrong (Turn.step_label), else 0.0
        "step_labels": _object_rows(
            [tuple(float(turn.step_label or 0.0) for turn in t.turns) for t in trajectories]
        ),
    }


def _with_mrope(
    text: torch.Tensor,
    attention: torch.Tensor,
    trajectories: Sequence[Trajectory],
    images: Sequence[ImageInputs | None],
    rope_index: RopeIndex,
) -> torch.Tensor:
    """``[B, 4, L]``: the text positions, then each row's M-RoPE rows computed on its unpadded
    sequence (as the engine's prefill computed them) and placed on its unpadded columns."""
    out = torch.zeros((text.shape[0], 4, text.shape[1]), dtype=text.dtype)
    out[:, 0] = text
    for i, (t, imgs) in enumerate(zip(trajectories, images, strict=True)):
        ids = t.token_ids()
        rows = torch.as_tensor(rope_index(ids.tolist(), imgs), dtype=text.dtype)
        if rows.shape != (3, len(ids)):
            raise ValueError(f"rope_index gave positions {tuple(rows.shape)} for {len(ids)} ids, not [3, L]")
        out[i, 1:, attention[i].bool()] = rows
    return out


def _multi_modal_inputs(images: ImageInputs | None) -> dict[str, torch.Tensor]:
    """One row's entry of verl's ``multi_modal_inputs`` (the processor's tensors; {}: none)."""
    if images is None:
        return {}
    return {
        "pixel_values": torch.from_numpy(np.ascontiguousarray(images.pixel_values, dtype=np.float32)),
        "image_grid_thw": torch.from_numpy(np.ascontiguousarray(images.image_grid_thw, dtype=np.int64)),
    }


def _object_rows(rows: list[tuple]) -> np.ndarray:
    """A 1-D object array of tuples (np.array would make a 2-D array of equal-length rows)."""
    out = np.empty(len(rows), dtype=object)
    for i, row in enumerate(rows):
        out[i] = row
    return out


def _response_columns(t: Trajectory) -> tuple[np.ndarray, ...]:
    """The after-prompt part of each per-token column, plus rewards placed on turn ends."""
    start = len(t.prompt_ids)
    ids, mask = t.token_ids()[start:], t.loss_mask()[start:].astype(np.int64)
    logp, versions = t.behavior_logprobs()[start:], t.policy_versions()[start:]
    scores = np.zeros(len(ids), dtype=np.float32)
    spans = [(a - start, b - start) for a, b in t.turn_spans()]
    for (_, end), turn in zip(spans, t.turns, strict=True):
        if end > 0:
            scores[end - 1] += turn.reward
    # `outcome_reward` is the episode's return; whatever the turn rewards do not already
    # account for (e.g. a tree leaf's outcome) goes on the last sampled token, so a row's
    # scores always sum to its outcome (what verl's outcome estimators read).
    last_model = next((end for _, end in reversed(spans) if end > 0), 0)
    if last_model:
        scores[last_model - 1] += t.outcome_reward - sum(turn.reward for turn in t.turns)
    return ids, mask, logp, versions, scores
