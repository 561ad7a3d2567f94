"""arborl's advantage estimators inside verl's own driver, with the per-row fields they need.

verl's ``RayPPOTrainer.fit`` computes advantages in its driver process through the module
function ``verl.trainer.ppo.ray_trainer.compute_advantage``, which hands a registered estimator
only ``token_level_rewards``, ``response_mask``, ``config`` and ``index`` (plus a few fields of
verl's own estimators). arborl's ``gigpo`` reads ``anchor_state_hashes`` and ``tree`` reads
``tree_paths``: per-row fields that arborl's agent loop puts in ``non_tensor_batch``.

`install()` (run in the driver by `ArborlTaskRunner`) registers arborl's estimators in that
process (importing `arborl.agents.credit` does) and wraps ``compute_advantage``: for the
step's estimator it binds every field of ``non_tensor_batch`` that the estimator names as a
parameter (`arborl.agents.credit.estimator_fields`, the rule arborl's own driver uses too),
then lets verl's function run as is::

    fit ──▶ compute_advantage(data, "gigpo", ...)        (wrapped)
              fields = {anchor_state_hashes: data.non_tensor_batch[...]}   ← gigpo's signature
              registry["gigpo"] = partial(gigpo, **fields) while verl's function runs
              ──▶ verl's compute_advantage ──▶ gigpo(token_level_rewards, response_mask, index, config, **fields)

It also records, per step, each group's scores and advantage range (`credit_log`, JSONL) when
``arborl.credit_log`` names a file: what a smoke test or a person checks credit with.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from arborl.agents.credit import estimator_fields

WHERE = "verl.trainer.ppo.ray_trainer.compute_advantage"
_EXPECTED = ("data", "adv_estimator", "gamma", "lam", "num_repeat", "norm_adv_by_std_in_grpo", "config")


def _log_credit(path: str, data: Any, estimator: str, fields: list[str]) -> None:
    adv = data.batch["advantages"]
    mask = data.batch["response_mask"].bool()
    scores = data.batch["token_level_rewards"].sum(-1).tolist()
    uids = [str(u) for u in data.non_tensor_batch.get("uid", [""] * len(scores))]
    groups: dict[str, dict[str, Any]] = {}
    for row, uid in enumerate(uids):
        g = groups.setdefault(uid, {"uid": uid, "scores": [], "adv_min": 0.0, "adv_max": 0.0})
        g["scores"].append(float(scores[row]))
        vals = adv[row][mask[row]]
        if vals.numel():
            g["adv_min"] = min(g["adv_min"], float(vals.min()))
            g["adv_max"] = max(g["adv_max"], float(vals.max()))
    record = {"estimator": estimator, "fields": fields, "rows": len(scores), "groups": list(groups.values())}
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def install(credit_log: str | None = None) -> None:
    """Register arborl's estimators in this process and wrap verl's ``compute_advantage``
    (idempotent). Raises `VerlPatchError` when verl's function no longer looks as expected."""
    from verl.trainer.ppo import core_algos, ray_trainer

    from arborl.trainer.verl.cpu import VerlPatchError

    original = getattr(ray_trainer, "compute_advantage", None)
    if original is None:
        raise VerlPatchError(f"{WHERE} is gone: arborl's estimators cannot get their per-row fields")
    if getattr(original, "_arborl_credit", False):
        original._arborl_credit_log = credit_log  # type: ignore[attr-defined]
        return
    params = tuple(inspect.signature(original).parameters)
    source = inspect.getsource(original)
    if params != _EXPECTED or "core_algos.get_adv_estimator_fn(adv_estimator)" not in source:
        raise VerlPatchError(
            f"{WHERE} changed (parameters {params}, or it no longer looks estimators up with "
            "core_algos.get_adv_estimator_fn): update arborl.trainer.verl.credit for this verl"
        )
    registry = core_algos.ADV_ESTIMATOR_REGISTRY

    @functools.wraps(original)
    def compute_advantage(data: Any, adv_estimator: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(adv_estimator, "value", adv_estimator)
        fn = registry.get(name)
        fields = estimator_fields(fn, data.non_tensor_batch) if fn is not None else []
        if not fields:
            out = original(data, adv_estimator, *args, **kwargs)
        else:
            registry[name] = functools.partial(fn, **{k: data.non_tensor_batch[k] for k in fields})
            try:
                out = original(data, adv_estimator, *args, **kwargs)
            finally:
                registry[name] = fn
        log = compute_advantage._arborl_credit_log  # type: ignore[attr-defined]
        if log:
            _log_credit(log, out, str(name), fields)
        return out

    compute_advantage._arborl_credit = True  # type: ignore[attr-defined]
    compute_advantage._arborl_credit_log = credit_log  # type: ignore[attr-defined]
    ray_trainer.compute_advantage = compute_advantage


def read_credit_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records `install(credit_log=path)` wrote, one per training step."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def mixed_groups(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The groups of a step whose episodes did not all score the same."""
    return [g for g in record["groups"] if len(set(np.round(g["scores"], 6))) > 1]
