"""Step-level credit: advantage estimators over token-level batches, registered into verl.

One module per estimator, each read top to bottom: the formula in numpy as the paper writes
it, the fast loop (numba) that computes the same, then the registration
(``@register_adv_est``, verl's registry)::

    grpo.py     GRPO's group normalisation (verl registers ``grpo``; GiGPO applies it twice)
    gigpo.py    ``gigpo``: episode groups plus anchor-state step groups (Feng et al. 2025)
    anchors.py  GiGPO's anchor groups: by state hash or by text similarity (verl-agent's), and
                their statistics (how many turns share an anchor)
    tree.py     ``tree``: tree / fork-relative values over a group's tree of rollouts
    turns.py    ``turn_returns``: discounted returns over turns, less the group's mean; GAE
    oracle.py   ``oracle_step``: GRPO plus each turn's right/wrong label from the env (an
                upper bound for step credit on labelled suites: tool-cues)
    layout.py   verl's token rows <-> flat turns, and the checks on flat arrays
    registry.py `compute_advantages`: any registered estimator on a DataProto, with the
                per-row fields it names (`estimator_fields`, which verl's driver uses too)

Importing this package registers ``gigpo``, ``tree``, ``turn_returns`` and ``oracle_step``;
verl's own (``grpo``, ``rloo``, ``gae``, ...) stay verl's. The hook that gives verl's Ray
trainer the per-row fields sits with that trainer (`arborl.trainer.verl.credit`).
"""

from .gigpo import GIGPO_MODES, compute_gigpo_advantage
from .layout import CreditError, turn_spans
from .oracle import compute_oracle_step_advantage
from .registry import DRIVER_PASSES, compute_advantages, estimator_fields, uniform_groups_carry_signal
from .tree import compute_tree_advantage
from .turns import compute_turn_returns_advantage

__all__ = [
    "DRIVER_PASSES",
    "GIGPO_MODES",
    "CreditError",
    "compute_advantages",
    "compute_gigpo_advantage",
    "compute_oracle_step_advantage",
    "compute_tree_advantage",
    "compute_turn_returns_advantage",
    "estimator_fields",
    "turn_spans",
    "uniform_groups_carry_signal",
]
