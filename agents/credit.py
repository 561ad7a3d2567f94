"""Step-level credit: advantage estimators over token-level batches, registered into verl.

Inputs in verl's layout (`arborl.trainer.batch` builds them)::

    response_mask       | 1 1 1 0 0 0 1 1 | 0 0 |   each run of 1s is one model turn
    token_level_rewards | 0 0 a 0 0 0 0 b | 0 0 |   each turn's reward on its last token
    index [B]            the group id of each row (episodes of one task / one tree)

verl's own driver (`compute_advantage`) passes exactly these to a registered estimator, so
`turn_returns` runs there as is. GiGPO and the tree estimator need more, which arborl's
driver (`compute_advantages` below) passes as keyword arguments:

    anchor_state_hashes [B]  per row, the hash of the env state each turn started from
                             (GiGPO's anchor states; the first turn's is the state after reset)
    tree_paths [B]         per row, the node id of each turn in its group's tree

Registered names: verl's ``grpo`` / ``rloo`` / ... stay verl's; arborl adds ``gigpo``,
``tree`` and ``turn_returns``. The maths runs in the numba kernels of `arborl.kernels`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import register_adv_est

from arborl.kernels import broadcast_to_tokens, discounted_returns, gigpo_step_advantages, tree_credit


class CreditError(ValueError):
    """An estimator is missing what it needs (the message says which batch field)."""


def turn_spans(response_mask: torch.Tensor) -> list[list[tuple[int, int]]]:
    """Per row, the ``[start, end)`` of each run of 1s in the mask: the turns."""
    m = response_mask.detach().to(torch.int8).cpu().numpy()
    padded = np.pad(m, ((0, 0), (1, 1)))
    edges = np.diff(padded, axis=1)
    out = []
    for row in edges:
        starts, ends = np.flatnonzero(row == 1), np.flatnonzero(row == -1)
        out.append(list(zip(starts.tolist(), ends.tolist(), strict=True)))
    return out


def _turn_rewards(rewards: torch.Tensor, spans: list[list[tuple[int, int]]]) -> list[np.ndarray]:
    r = rewards.detach().to(torch.float64).cpu().numpy()
    return [np.array([r[i, a:b].sum() for a, b in row]) for i, row in enumerate(spans)]


def _to_tokens(
    per_turn: list[np.ndarray], spans: list[list[tuple[int, int]]], like: torch.Tensor
) -> torch.Tensor:
    out = torch.zeros_like(like, dtype=torch.float32)
    for i, (vals, row) in enumerate(zip(per_turn, spans, strict=True)):
        if row:
            lengths = [b - a for a, b in row]
            tokens = broadcast_to_tokens(vals, np.concatenate([[0], np.cumsum(lengths)]))
            cols = np.concatenate([np.arange(a, b) for a, b in row])
            out[i, torch.from_numpy(cols)] = torch.from_numpy(tokens).float()
    return out


def _offsets(lengths: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _cfg_value(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    value = config.get(key, default) if isinstance(config, Mapping) else getattr(config, key, default)
    return default if value is None else value


def _cfg(config: Any, key: str, default: float) -> float:
    return float(_cfg_value(config, key, default))


def _group_ids(index: Any, n: int) -> np.ndarray:
    if index is None:
        raise CreditError("this estimator needs `index` (the group id of each row, uid in verl)")
    _, ids = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
    if ids.shape[0] != n:
        raise CreditError(f"index has {ids.shape[0]} entries for {n} rows")
    return ids.astype(np.int64)


@register_adv_est("turn_returns")
def compute_turn_returns_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    gamma: float | None = None,
    epsilon: float = 1e-6,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn-level discounted returns, broadcast to each turn's tokens.

    ``G_t = r_t + γ G_{t+1}`` over the turns of a row (γ: ``gamma``, else ``config.gamma``,
    else 1). Advantage ``A_t = G_t - b``, where the baseline ``b`` is the mean episode return
    ``G_0`` of the row's group (no baseline when ``index`` is None). Returns ``(A, G)``.
    """
    g = _cfg(config, "gamma", 1.0) if gamma is None else float(gamma)
    spans = turn_spans(response_mask)
    per_turn = _turn_rewards(token_level_rewards, spans)
    ret = discounted_returns(
        np.concatenate(per_turn) if per_turn else [], _offsets([len(p) for p in per_turn]), g
    )
    split = np.split(ret, np.cumsum([len(p) for p in per_turn])[:-1]) if per_turn else []
    first = np.array([s[0] if len(s) else 0.0 for s in split])
    baseline = np.zeros_like(first)
    if index is not None:
        groups = _group_ids(index, len(first))
        means = np.bincount(groups, weights=first) / np.bincount(groups)
        baseline = means[groups]
    adv = [s - b for s, b in zip(split, baseline, strict=True)]
    return _to_tokens(adv, spans, token_level_rewards), _to_tokens(list(split), spans, token_level_rewards)


#: GiGPO's normalisations (verl-agent's ``mode``): ``mean_norm`` subtracts the group mean
#: (verl-agent's default), ``mean_std_norm`` also divides by the group's std (+ ε).
GIGPO_MODES = ("mean_norm", "mean_std_norm")


def _group_normalise(
    scores: np.ndarray, keys: np.ndarray, lone_mean: str, use_std: bool, eps: float
) -> np.ndarray:
    """``(x - mean_k) [/ (std_k + eps)]`` within each key; for a key of one member the mean is
    0 (``lone_mean="zero"``: GRPO's and verl-agent's episode rule) or the member itself
    (``"self"``: its advantage is 0, GiGPO's step rule). std is unbiased, 1 for one member."""
    _, ids = np.unique(keys, return_inverse=True)
    counts = np.bincount(ids).astype(np.float64)
    means = np.bincount(ids, weights=scores) / counts
    if lone_mean == "zero":
        means = np.where(counts > 1, means, 0.0)
    out = scores - means[ids]
    if use_std:
        sq = np.bincount(ids, weights=(scores - means[ids]) ** 2)
        std = np.where(counts > 1, np.sqrt(sq / np.maximum(counts - 1, 1)), 1.0)
        out = out / (std[ids] + eps)
    return out


@register_adv_est("gigpo")
def compute_gigpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    anchor_state_hashes: Any = None,
    step_weight: float | None = None,
    gamma: float | None = None,
    mode: str | None = None,
    epsilon: float = 1e-6,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GiGPO (Feng et al., 2025, eq. 3-8): episode-level plus anchor-state step-level groups.

    For turn ``t`` of row ``i`` (episode group = the rows of one ``index``)::

        A(i, t) = A_E(i) + ω · A_S(i, t)
        A_E(i)    = (R_i - mean_group R) [/ (std_group R + ε)]      R_i = Σ_t r_{i,t} (undiscounted)
        A_S(i, t) = (G_{i,t} - mean_anchor G) [/ (std_anchor G + ε)] G_{i,t} = Σ_k γ^(k-t) r_{i,k}

    The anchor group of a turn is every turn of the same episode group taken from the same
    env state: ``anchor_state_hashes[i][t]`` is the hash of the state turn t *started from*
    (after reset for the first turn), so different actions from one state are compared. A turn
    alone in its anchor group (the common case) gets ``A_S = 0``; an unknown state (``""``)
    never matches anything. A lone episode keeps ``A_E = R`` (mean 0, std 1: GRPO's and
    verl-agent's rule). ``[/ ...]`` only with ``mode="mean_std_norm"``; ``mean_norm`` (the
    default, as verl-agent's) subtracts the mean only. std is unbiased (torch.std).

    Options (keyword, else ``config.<key>``, else the default): ``step_weight``
    (``gigpo_step_weight``, 1), ``gamma`` (``gamma``, 1), ``mode`` (``gigpo_mode``,
    ``mean_norm``). verl-agent's GiGPO recipes use ω 1, γ 0.95, ``mean_norm``.
    Returns ``(A, G)`` per token.
    """
    if anchor_state_hashes is None:
        hint = (
            " (turn_state_hashes / next_state_hashes are the states *after* each turn, not anchors)"
            if "turn_state_hashes" in kwargs or "next_state_hashes" in kwargs
            else ""
        )
        raise CreditError(
            "gigpo needs anchor_state_hashes (per row, the hash of the env state each turn started "
            "from); arborl.trainer.batch puts it in non_tensor_batch, arborl's compute_advantages "
            "passes it" + hint
        )
    w = _cfg(config, "gigpo_step_weight", 1.0) if step_weight is None else float(step_weight)
    g = _cfg(config, "gamma", 1.0) if gamma is None else float(gamma)
    if mode is None:
        mode = str(_cfg_value(config, "gigpo_mode", "mean_norm"))
    if mode not in GIGPO_MODES:
        raise CreditError(f"gigpo mode must be one of {GIGPO_MODES}, got {mode!r}")
    use_std = mode == "mean_std_norm"
    spans = turn_spans(response_mask)
    per_turn = _turn_rewards(token_level_rewards, spans)
    lengths = [len(p) for p in per_turn]
    hashes = [list(h) for h in anchor_state_hashes]
    if [len(h) for h in hashes] != lengths:
        raise CreditError(
            f"anchor_state_hashes has {[len(h) for h in hashes]} turns per row; the mask has {lengths}"
        )
    groups = _group_ids(index, len(lengths))
    returns = discounted_returns(np.concatenate(per_turn) if per_turn else [], _offsets(lengths), g)
    # Hash strings → int ids (one id per distinct state); "" (unknown state) never matches anything.
    table: dict[str, int] = {}
    state_ids = []
    for k, h in enumerate(s for row in hashes for s in row):
        state_ids.append(table.setdefault(str(h), len(table)) if h else -1 - k)
    step_adv, _ = gigpo_step_advantages(
        returns, np.repeat(groups, lengths), np.asarray(state_ids, dtype=np.int64), epsilon, use_std
    )
    totals = np.array([p.sum() for p in per_turn], dtype=np.float64)
    episode = _group_normalise(totals, groups, "zero", use_std, epsilon)
    split = np.split(step_adv, np.cumsum(lengths)[:-1]) if lengths else []
    adv = [episode[i] + w * s for i, s in enumerate(split)]
    ret = np.split(returns, np.cumsum(lengths)[:-1]) if lengths else []
    return _to_tokens(adv, spans, token_level_rewards), _to_tokens(ret, spans, token_level_rewards)


@register_adv_est("tree")
def compute_tree_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    tree_paths: Any = None,
    global_weight: float | None = None,
    local_weight: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tree / fork-relative advantages (TreeRL, Hou et al. 2025; PORTool): node value ``V(n)``
    is the mean outcome of the leaves below ``n``; each turn ``n`` of a leaf's path gets

        ``A(n) = w_g · (V(n) - V(root)) + w_l · (V(n) - V(parent(n)))``

    (global: better than the task on average; local: better than its siblings' fork point).
    ``V(root)`` is the group's mean leaf outcome, the parent of a first turn is the root.
    Weights: ``global_weight`` / ``local_weight`` (else ``config.tree_global_weight`` /
    ``tree_local_weight``, else 1 / 1). Rows are the tree's leaves: one row per leaf path.
    Returns ``(A, V)`` per token.
    """
    if tree_paths is None:
        raise CreditError("tree needs tree_paths (each row's node id per turn, within its group's tree)")
    wg = _cfg(config, "tree_global_weight", 1.0) if global_weight is None else float(global_weight)
    wl = _cfg(config, "tree_local_weight", 1.0) if local_weight is None else float(local_weight)
    spans = turn_spans(response_mask)
    outcomes = token_level_rewards.detach().to(torch.float64).sum(-1).cpu().numpy()
    groups = _group_ids(index, len(spans))
    paths = [list(p) for p in tree_paths]
    if [len(p) for p in paths] != [len(s) for s in spans]:
        raise CreditError("tree_paths must give one node id per turn of each row")
    adv_rows: list[np.ndarray] = [np.zeros(0)] * len(paths)
    val_rows: list[np.ndarray] = [np.zeros(0)] * len(paths)
    for grp in np.unique(groups):
        rows = np.flatnonzero(groups == grp)
        # Build the group's forest: a virtual root (-1) over the first turns; nodes in order.
        order: dict[Any, int] = {}
        parents: list[int] = [-1]  # node 0 is the virtual root
        leaf_reward: list[float] = [0.0]
        for r in rows:
            parent = 0
            for node in paths[r]:
                if node not in order:
                    order[node] = len(parents)
                    parents.append(parent)
                    leaf_reward.append(0.0)
                parent = order[node]
            if paths[r]:
                leaf_reward[parent] = outcomes[r]
        values, local = tree_credit(np.asarray(parents), np.asarray(leaf_reward))
        for r in rows:
            ids = [order[n] for n in paths[r]]
            adv_rows[r] = wg * (values[ids] - values[0]) + wl * local[ids]
            val_rows[r] = values[ids]
    return _to_tokens(adv_rows, spans, token_level_rewards), _to_tokens(val_rows, spans, token_level_rewards)


#: What a driver (verl's ``compute_advantage``, `compute_advantages` below) passes itself:
#: never taken from ``non_tensor_batch``.
DRIVER_PASSES = frozenset(
    {
        "token_level_rewards",
        "response_mask",
        "index",
        "config",
        "reward_baselines",
        "non_tensor_batch",
        "batch",
    }
)


def estimator_fields(fn: Callable[..., Any], available: Mapping[str, Any]) -> list[str]:
    """The per-row fields among ``available`` (a batch's ``non_tensor_batch``) that the
    estimator ``fn`` takes by name: how both drivers find what an estimator needs, so a new
    estimator (or a renamed field) needs no list of names anywhere."""
    params = inspect.signature(fn).parameters
    return [k for k in available if k in params and k not in DRIVER_PASSES]


def compute_advantages(data: Any, estimator: str, **options: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a registered estimator (verl's or arborl's) on a DataProto.

    Passes what verl's driver passes (``token_level_rewards`` — here the batch's
    ``token_level_scores`` when no rewards were shaped —, ``response_mask``, ``index``) plus
    arborl's extra per-row fields, and ``options`` (e.g. ``gamma=0.9``, ``step_weight=0.5``,
    ``mode="mean_std_norm"``) as keyword arguments.
    """
    fn = core_algos.get_adv_estimator_fn(estimator)
    batch, extra = data.batch, data.non_tensor_batch
    rewards = (
        batch["token_level_rewards"] if "token_level_rewards" in batch.keys() else batch["token_level_scores"]  # noqa: SIM118 - a TensorDict
    )
    kwargs: dict[str, Any] = {"token_level_rewards": rewards, "response_mask": batch["response_mask"]}
    if "uid" in extra:
        kwargs["index"] = extra["uid"]
    # An estimator gets the per-row fields it names as parameters (verl's take none of them).
    kwargs.update({k: extra[k] for k in estimator_fields(fn, extra)})
    kwargs.update(options)
    return fn(**kwargs)  # type: ignore[no-any-return]
