"""Running a registered estimator on a DataProto: what arborl's driver passes it.

verl's driver (``compute_advantage``) hands an estimator only ``token_level_rewards``,
``response_mask``, ``index`` and ``config``; ``gigpo`` and ``tree`` also need per-row fields of
``non_tensor_batch`` (``anchor_state_hashes``, ``tree_paths``). An estimator names what it needs
as keyword parameters, and `estimator_fields` reads them off its signature: arborl's driver
(`compute_advantages`) and the hook in verl's (`arborl.trainer.verl.credit`) both use it, so a
new estimator (or a renamed field) needs no list of names anywhere.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
from verl.trainer.ppo import core_algos

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


#: Estimators that credit steps, not only outcomes: in a group whose episodes all scored the same
#: their advantages can still differ (a turn that looped returns less under γ < 1 than one that
#: moved on; rewards can come at different turns), so the trainer keeps such groups for them.
#: For outcome-level estimators (verl's ``grpo``, ``rloo``; ``tree``, whose node values are
#: leaf-outcome means) such a group's advantages are all 0: it is dropped as carrying no signal.
_STEP_LEVEL: set[str] = set()


def register_step_level(name: str) -> None:
    """Mark the registered estimator ``name`` as step-level (see `uniform_groups_carry_signal`)."""
    _STEP_LEVEL.add(name)


def uniform_groups_carry_signal(estimator: str) -> bool:
    """Whether ``estimator`` can give non-zero advantages to a group whose episodes all scored
    the same (step-level credit); False for outcome-level ones and for any unknown name."""
    return estimator in _STEP_LEVEL


def estimator_fields(fn: Callable[..., Any], available: Mapping[str, Any]) -> list[str]:
    """The per-row fields among ``available`` (a batch's ``non_tensor_batch``) that the
    estimator ``fn`` takes by name."""
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
    return fn(**kwargs)
