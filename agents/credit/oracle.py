"""``oracle_step``: episode credit plus each step told whether it was right (issue 50 §2).

For turn ``t`` of episode ``i`` (episode group: the episodes of one task, verl's ``index``)::

    A_E(i)   = GRPO over the group's episode totals R_i = Σ_t r_{i,t}   (GiGPO's eq. 3, the same code)
    l(i, t)  = +1 the turn took a right action, -1 a wrong one, 0 otherwise (an oracle's label)
    A(i, t)  = A_E(i) + w · l(i, t)

Not a method to train with: the labels come from the env's knowledge of the task
(tool-cues' door tool knows the rule; `Turn.step_label`, ``non_tensor_batch["step_labels"]``),
which no real env offers. It is the upper bound of step credit on such a suite: every step is
told exactly whether it was right, where GiGPO has to infer it from anchor groups of
returns. An estimator that closes the gap to it has learned all step credit can give.

The episode term is GiGPO's (`gigpo.episode_advantages`, over `grpo.group_normalise`), with
GiGPO's options for it (``mode``, ``episode_norm``), so ``gigpo`` and ``oracle_step`` differ in
the step term only. There is nothing to make fast: the labels are added as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from verl.trainer.ppo.core_algos import register_adv_est

from .gigpo import EPISODE_NORMS, GIGPO_MODES, episode_advantages
from .layout import (
    CreditError,
    FloatArray,
    option,
    row_groups,
    split_rows,
    to_tokens,
    turn_rewards,
    turn_spans,
)
from .registry import register_step_level

# ─── the formula ─────────────────────────────────────────────────────────────────────────


def oracle_step_advantages(
    episode_advantage: npt.ArrayLike, labels: Sequence[npt.ArrayLike], step_weight: float
) -> list[FloatArray]:
    """``A(i, t) = A_E(i) + w · l(i, t)``: per row ``i``, one advantage per turn.

    Shapes: ``episode_advantage [B]``, ``labels`` B rows of ``[T_i]`` -> B rows of ``[T_i]``.
    """
    a_e = np.asarray(episode_advantage, dtype=np.float64)
    return [a_e[i] + step_weight * np.asarray(row, dtype=np.float64) for i, row in enumerate(labels)]


# ─── the registration ────────────────────────────────────────────────────────────────────


@register_adv_est("oracle_step")
def compute_oracle_step_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    step_labels: Any = None,
    step_weight: float | None = None,
    mode: str | None = None,
    episode_norm: str | None = None,
    epsilon: float = 1e-6,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Episode-level GRPO plus an oracle's label of each step (see the module docstring)::

        A(i, t) = A_E(i) + w · step_labels[i][t]
        A_E(i)  = (R_i - mean_group R) [/ (std_group R + ε)]      R_i = Σ_t r_{i,t}

    ``step_labels`` (per row, one number per turn: +1 right, -1 wrong, 0 otherwise) is the
    batch field `arborl.trainer.dataproto` fills from `Turn.step_label`. Options (keyword, else
    ``config.<key>``, else the default): ``step_weight`` (``oracle_step_weight``, 1), and for
    ``A_E`` GiGPO's ``mode`` (``gigpo_mode``, ``mean_norm``) and ``episode_norm``
    (``gigpo_episode_norm``, ``trajectory``). Returns ``(A, A)`` per token: there is no return
    to report besides the advantage (verl's ``grpo`` does the same).
    """
    if step_labels is None:
        raise CreditError(
            "oracle_step needs step_labels (per row, one label per turn: +1 a right action, -1 a "
            "wrong one, 0 otherwise); arborl.trainer.dataproto puts it in non_tensor_batch from "
            "Turn.step_label, which only envs that label their steps fill (tool-cues)"
            + (f"; the batch passed {sorted(kwargs)}" if kwargs else "")
        )
    w = float(option(step_weight, config, "oracle_step_weight", 1.0))
    mode = str(option(mode, config, "gigpo_mode", "mean_norm"))
    if mode not in GIGPO_MODES:
        raise CreditError(f"oracle_step mode must be one of {GIGPO_MODES}, got {mode!r}")
    norm = str(option(episode_norm, config, "gigpo_episode_norm", "trajectory"))
    if norm not in EPISODE_NORMS:
        raise CreditError(f"oracle_step episode_norm must be one of {EPISODE_NORMS}, got {norm!r}")
    spans = turn_spans(response_mask)
    per_turn = turn_rewards(token_level_rewards, spans)
    lengths = [len(p) for p in per_turn]
    labels = _labels(step_labels, lengths)
    groups = row_groups(index, len(lengths))
    totals = np.array([p.sum() for p in per_turn], dtype=np.float64)
    a_e = episode_advantages(totals, groups, lengths, norm, mode == "mean_std_norm", epsilon)
    adv = oracle_step_advantages(a_e, split_rows(labels, lengths), w)
    tokens = to_tokens(adv, spans, token_level_rewards)
    return tokens, tokens.clone()


# a group whose episodes all scored the same still has its turns' labels to learn from
register_step_level("oracle_step")


def _labels(rows: Any, lengths: list[int]) -> FloatArray:
    """The labels flat, checked against the turns the mask holds."""
    if len(rows) != len(lengths):
        raise CreditError(f"step_labels has {len(rows)} rows for {len(lengths)} in the batch")
    got = [len(r) for r in rows]
    if got != lengths:
        raise CreditError(f"step_labels has {got} turns per row; the mask has {lengths}")
    try:
        flat = np.array([float(x) for r in rows for x in r], dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise CreditError(f"step_labels must be numbers (+1, -1, 0): {e}") from e
    if not np.all(np.isfinite(flat)):
        raise CreditError("step_labels must be finite")
    return flat
