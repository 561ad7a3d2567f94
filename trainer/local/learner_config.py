"""The learner's settings (`LearnerConfig`) and what they become in verl and torch.

`verl_actor_config` is the verl `ActorConfig` its policy-loss functions read (the loss is
looked up in verl's registry by `policy_loss_mode`: `loss_mode`, or verl's bypass mode for the
corrections that run in it, `off_policy.py`);
`lr_lambda` is the learning-rate schedule: a linear warm-up over `warmup_steps`, then
constant, or a cosine or linear decay to 0 at `total_steps`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from verl.trainer.ppo import core_algos

from .off_policy import get_correction


class LearnerConfig(BaseModel):
    """Optimiser, loss and correction settings of the learner."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(1e-5, gt=0, description="peak learning rate (AdamW)")
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = Field(1.0, gt=0, description="max global grad norm")
    warmup_steps: int = Field(0, ge=0, description="linear warm-up of the learning rate")
    schedule: Literal["constant", "cosine", "linear"] = Field("constant", description="after warm-up")
    total_steps: int = Field(1000, ge=1, description="length of the cosine / linear schedule")
    loss_mode: str = Field(
        "vanilla", description="verl policy-loss registry name (vanilla, gspo, cispo, ...)"
    )
    loss_agg_mode: str = Field("token-mean", description="verl agg_loss mode")
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    clip_ratio_c: float = Field(3.0, gt=1.0, description="dual-clip bound for negative advantages")
    entropy_coeff: float = Field(
        0.0,
        description="verl's actor.entropy_coeff: the loss subtracts this times the mean token entropy "
        "(aggregated as the policy loss is), an entropy bonus; 0: off",
    )
    use_kl_loss: bool = Field(
        False,
        description="verl's actor.use_kl_loss: add kl_loss_coef x KL(π_θ ‖ π_ref) to the loss, π_ref "
        "the policy as RL starts (after any warm start), a frozen copy scoring every batch",
    )
    kl_loss_coef: float = Field(0.001, ge=0, description="verl's actor.kl_loss_coef (with use_kl_loss)")
    kl_loss_type: str = Field(
        "low_var_kl",
        description="verl's kl_penalty estimator: kl (k1), abs, mse (k2), low_var_kl (k3); a '+' "
        "suffix keeps the value and takes k2's unbiased gradient (low_var_kl+)",
    )
    correction: str = Field(
        "decoupled",
        description="off-policy correction (trainer/local/off_policy.py): decoupled, none, tis, "
        "seq_tis, seq_mis, geo_mask, m2po",
    )
    is_threshold: float = Field(
        2.0, gt=0, description="truncation C of importance weights (decoupled, tis, seq_tis, geo_mask)"
    )
    seq_mis_bounds: tuple[float, float] = Field(
        (0.5, 2.0),
        description="seq_mis: [l, u] a sequence's ratio Π π_θ/π_behav must stay in, or it is dropped",
    )
    geo_mask_bounds: tuple[float, float] = Field(
        (0.9, 1.1),
        description="geo_mask: [l, u] a sequence's geometric-mean token ratio must stay in, or it is dropped",
    )
    m2_threshold: float = Field(
        0.04, gt=0, description="m2po: τ, the most the kept tokens' mean (log π_prox/π_behav)² may be"
    )
    proximal: Literal["reuse", "recompute"] = Field(
        "reuse",
        description="decoupled: take π_prox from the training forward (detached; only where "
        "that is exact: one mini-batch, one epoch, no dropout) or always from a no-grad forward",
    )
    ppo_epochs: int = Field(1, ge=1, description="passes over each batch (verl's actor.ppo_epochs)")
    ppo_mini_batch_size: int | None = Field(
        None,
        ge=1,
        description="groups (prompts) per optimiser step, whole groups, as verl's "
        "actor.ppo_mini_batch_size counts prompts; None: the whole batch in one step",
    )
    micro_batch_size: int = Field(8, ge=1, description="rows per forward/backward")
    temperature: float = Field(1.0, gt=0, description="the rollout sampling temperature")
    kernel_backend: Literal["auto", "torch", "triton"] = "auto"
    share_prefix_min: int = Field(
        16, ge=0, description="compute a prompt prefix this long shared by a micro-batch once (0: never)"
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict):
            old = sorted(set(data) & set(_RENAMED))
            if old:
                raise ValueError(
                    f"learner.{old[0]} is now verl's name: "
                    + ", ".join(f"{k} → {_RENAMED[k]}" for k in old)
                    + " (a KL term also needs learner.use_kl_loss=true)"
                )
        return data

    @field_validator("correction")
    @classmethod
    def _known_correction(cls, name: str) -> str:
        get_correction(name)  # an unknown name's error lists the known ones
        return name

    @field_validator("seq_mis_bounds", "geo_mask_bounds")
    @classmethod
    def _bounds(cls, bounds: tuple[float, float]) -> tuple[float, float]:
        lo, hi = bounds
        if not 0 < lo <= hi:
            raise ValueError(f"bounds [l, u] need 0 < l <= u, got [{lo}, {hi}] (e.g. [0.5, 2.0])")
        return bounds

    @field_validator("kl_loss_type")
    @classmethod
    def _verl_estimator(cls, name: str) -> str:
        try:
            core_algos.kl_penalty(torch.zeros(1), torch.zeros(1), name)
        except NotImplementedError:
            raise ValueError(
                f"learner.kl_loss_type={name!r} is not one of verl's kl_penalty estimators: "
                "kl, k1, abs, mse, k2, low_var_kl, k3 (a '+' suffix: k2's gradient)"
            ) from None
        return name


_RENAMED = {"entropy_coef": "entropy_coeff", "kl_coef": "kl_loss_coef", "kl_penalty": "kl_loss_type"}


def lr_lambda(cfg: LearnerConfig) -> Callable[[int], float]:
    """The factor of `cfg.lr` at each optimiser step (`torch.optim.lr_scheduler.LambdaLR`)."""

    def f(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        frac = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.total_steps - cfg.warmup_steps))
        if cfg.schedule == "cosine":
            return 0.5 * (1 + math.cos(math.pi * frac))
        if cfg.schedule == "linear":
            return 1.0 - frac
        return 1.0

    return f


def policy_loss_mode(cfg: LearnerConfig) -> str:
    """The name of the policy loss in verl's registry: verl's bypass mode for the corrections
    that run in it (tis, seq_tis, ...), else `loss_mode`."""
    return "bypass_mode" if get_correction(cfg.correction).verl_config(cfg) is not None else cfg.loss_mode


def verl_actor_config(cfg: LearnerConfig) -> Any:
    """The verl `ActorConfig` its policy-loss functions read."""
    from verl.workers.config import ActorConfig
    from verl.workers.config.actor import PolicyLossConfig

    policy_loss = PolicyLossConfig(loss_mode=cfg.loss_mode)
    correction = get_correction(cfg.correction).verl_config(cfg)
    if correction is not None:
        policy_loss = PolicyLossConfig(loss_mode="bypass_mode", rollout_correction=correction)
    actor = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=cfg.micro_batch_size,
        clip_ratio=cfg.clip_ratio_low,
        clip_ratio_low=cfg.clip_ratio_low,
        clip_ratio_high=cfg.clip_ratio_high,
        clip_ratio_c=cfg.clip_ratio_c,
        loss_agg_mode=cfg.loss_agg_mode,
        policy_loss=policy_loss,
        entropy_coeff=cfg.entropy_coeff,
        use_kl_loss=cfg.use_kl_loss,
        kl_loss_coef=cfg.kl_loss_coef,
        kl_loss_type=cfg.kl_loss_type,
    )
    return actor
