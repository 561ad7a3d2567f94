"""Clipped PPO policy loss fused with the LM-head log-prob kernel.

One call goes from the policy's last hidden states to the scalar loss, never building
``[tokens, vocab]`` logits; ``loss.backward()`` reaches ``hidden`` / ``weight`` / ``bias``
through the chunked (or Triton) backward. Only response tokens (``response_mask != 0``) go
through the LM head: prompt and padding positions cost nothing::

    response_mask   | 1 1 1 1 | 0 0 0 |      <- one row of [B, L]; 0 = padding / not trained
    hidden [B, L, d] ──select mask──▶ [n, d] ──fused kernel──▶ logprob, entropy [n] ──▶ [B, L]
    ratio = exp(clamp(logp - old_logp, ±20))
    pg    = max(-A·ratio, -A·clip(ratio, 1-ε_low, 1+ε_high));  if A < 0: min(pg, -A·c)  (dual clip)
    loss  = agg(pg) - entropy_coeff · agg(entropy)

The maths is verl's ``compute_policy_loss_vanilla`` + ``agg_loss`` (verl 0.9.1), re-stated
here because ``kernels/`` may not import the trainer stack; ``tests/kernels`` checks the two
agree in value, metrics and gradients for every aggregation mode.

This is a tested kernel, not the loss `arborl train` optimises: the learner
(trainer/learner.py) takes its policy loss from verl's registry
(``get_policy_loss_fn``), so loss modes, off-policy correction and verl's own trainer stay
one definition. Change the learner's loss there, not here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .errors import DTypeMismatchError, KernelInputError, ShapeMismatchError
from .functional import Backend, fused_logprob_entropy

AggFn = Callable[..., torch.Tensor]
AGG_LOSSES: dict[str, AggFn] = {}


def register_agg(name: str) -> Callable[[AggFn], AggFn]:
    """Register a loss aggregation mode under ``name`` (verl's names)."""

    def deco(fn: AggFn) -> AggFn:
        AGG_LOSSES[name] = fn
        return fn

    return deco


def masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is non-zero, weighted by ``mask`` (nan outside is ignored)."""
    return (torch.where(mask.bool(), values, 0.0) * mask).sum()


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``masked_sum / (Σ mask + 1e-8)``, as verl."""
    return masked_sum(values, mask) / (mask.sum() + 1e-8)


@register_agg("token-mean")
def _token_mean(loss: torch.Tensor, mask: torch.Tensor, dp_size: int, batch_num_tokens, **_) -> torch.Tensor:
    if batch_num_tokens is None:
        if dp_size > 1:
            raise KernelInputError("token-mean with dp_size > 1 needs the global batch_num_tokens")
        batch_num_tokens = mask.sum()
    return masked_sum(loss, mask) / batch_num_tokens * dp_size


@register_agg("token-sum")
def _token_sum(loss: torch.Tensor, mask: torch.Tensor, dp_size: int, **_) -> torch.Tensor:
    return masked_sum(loss, mask) * dp_size


def _seq_mean(
    seq_losses: torch.Tensor, seq_mask: torch.Tensor, dp_size: int, global_batch_size
) -> torch.Tensor:
    if global_batch_size is None:
        if dp_size > 1:
            raise KernelInputError("seq-mean modes with dp_size > 1 need the global_batch_size")
        global_batch_size = seq_mask.sum()
    return masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size


@register_agg("seq-mean-token-sum")
def _seq_mean_token_sum(loss, mask, dp_size, global_batch_size=None, **_) -> torch.Tensor:
    seq_mask = (mask.sum(dim=-1) > 0).float()  # fully masked rows do not count
    return _seq_mean((loss * mask).sum(dim=-1), seq_mask, dp_size, global_batch_size)


@register_agg("seq-mean-token-sum-norm")
def _seq_mean_token_sum_norm(loss, mask, dp_size, global_batch_size=None, loss_scale_factor=None, **_):
    scale = mask.shape[-1] if loss_scale_factor is None else loss_scale_factor
    return _seq_mean_token_sum(loss, mask, dp_size, global_batch_size) / scale


@register_agg("seq-mean-token-mean")
def _seq_mean_token_mean(loss, mask, dp_size, global_batch_size=None, **_) -> torch.Tensor:
    counts = mask.sum(dim=-1)
    seq_losses = (loss * mask).sum(dim=-1) / (counts + 1e-8)
    return _seq_mean(seq_losses, (counts > 0).float(), dp_size, global_batch_size)


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    dp_size: int = 1,
    batch_num_tokens: int | torch.Tensor | None = None,
    global_batch_size: int | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregate a ``[B, L]`` loss matrix to a scalar, with verl's modes and global normalisers.

    ``batch_num_tokens`` / ``global_batch_size`` are the *global* token / sequence counts when
    the batch is split over ``dp_size`` ranks or micro-batches (``None``: this batch's own).
    """
    if loss_agg_mode not in AGG_LOSSES:
        raise KernelInputError(f"loss_agg_mode must be one of {sorted(AGG_LOSSES)}, got {loss_agg_mode!r}")
    return AGG_LOSSES[loss_agg_mode](
        loss_mat,
        loss_mask,
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_batch_size,
        loss_scale_factor=loss_scale_factor,
    )


@dataclass(frozen=True)
class PPOLossConfig:
    """Clipped-surrogate settings (verl's ``actor`` config names)."""

    clip_ratio: float = 0.2
    """ε of the PPO clip, used for either side left at None."""
    clip_ratio_low: float | None = None
    """Lower clip: the ratio is clipped below at ``1 - clip_ratio_low``."""
    clip_ratio_high: float | None = None
    """Upper clip: the ratio is clipped above at ``1 + clip_ratio_high`` (DAPO's clip-higher)."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound for negative advantages (must be > 1); see arXiv:1912.09729."""
    loss_agg_mode: str = "token-mean"
    """One of ``AGG_LOSSES``: token-mean, token-sum, seq-mean-token-sum(-norm), seq-mean-token-mean."""
    entropy_coeff: float = 0.0
    """Weight of the entropy bonus: ``loss = pg_loss - entropy_coeff · agg(entropy)``."""
    loss_scale_factor: float | None = None
    """Divisor of ``seq-mean-token-sum-norm`` (None: the response length L)."""

    def __post_init__(self) -> None:
        if not self.clip_ratio_c > 1.0:
            raise KernelInputError(f"clip_ratio_c must be > 1 for dual-clip PPO, got {self.clip_ratio_c}")
        if self.loss_agg_mode not in AGG_LOSSES:
            raise KernelInputError(
                f"loss_agg_mode must be one of {sorted(AGG_LOSSES)}, got {self.loss_agg_mode!r}"
            )


@dataclass(frozen=True)
class PolicyLossOutput:
    """Loss (differentiable), per-token outputs and detached metrics of one policy-loss call."""

    loss: torch.Tensor
    """Scalar to call ``backward()`` on: ``pg_loss - entropy_coeff · entropy_loss``."""
    pg_loss: torch.Tensor
    entropy_loss: torch.Tensor
    """``agg(entropy)`` with the loss's aggregation mode (the entropy metric)."""
    logprobs: torch.Tensor
    """``[B, L]`` current-policy log-probs of the targets (0 where the mask is 0)."""
    entropy: torch.Tensor
    """``[B, L]`` per-token entropy (0 where the mask is 0)."""
    pg_clipfrac: torch.Tensor
    pg_clipfrac_lower: torch.Tensor
    ppo_kl: torch.Tensor

    def metrics(self) -> dict[str, float]:
        """verl's metric names and values (calls ``.item()``: a device sync on GPU)."""
        return {
            "actor/pg_loss": float(self.pg_loss.detach()),
            "actor/pg_clipfrac": float(self.pg_clipfrac),
            "actor/ppo_kl": float(self.ppo_kl),
            "actor/pg_clipfrac_lower": float(self.pg_clipfrac_lower),
            "actor/entropy": float(self.entropy_loss.detach()),
        }


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    config: PPOLossConfig,
    rollout_is_weights: torch.Tensor | None = None,
    dp_size: int = 1,
    batch_num_tokens: int | torch.Tensor | None = None,
    global_batch_size: int | torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Dual-clip PPO surrogate on ``[B, L]`` log-probs -> ``(pg_loss, clipfrac, clipfrac_lower, ppo_kl)``.

    The three metrics come back detached. ``dp_size``, ``batch_num_tokens`` and
    ``global_batch_size`` are the global normalisers of ``agg_loss``.
    """
    low = config.clip_ratio if config.clip_ratio_low is None else config.clip_ratio_low
    high = config.clip_ratio if config.clip_ratio_high is None else config.clip_ratio_high
    neg_kl = torch.clamp(logprobs - old_logprobs, min=-20.0, max=20.0)
    ratio = torch.exp(neg_kl)
    ppo_kl = masked_mean(-neg_kl, response_mask)
    pg1 = -advantages * ratio
    pg2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    clipped = torch.maximum(pg1, pg2)
    clipfrac = masked_mean(torch.gt(pg2, pg1).float(), response_mask)
    pg3 = -advantages * config.clip_ratio_c
    dual = torch.min(pg3, clipped)
    clipfrac_lower = masked_mean(torch.gt(clipped, pg3) * (advantages < 0).float(), response_mask)
    pg = torch.where(advantages < 0, dual, clipped)
    if rollout_is_weights is not None:
        pg = pg * rollout_is_weights
    pg_loss = agg_loss(
        pg,
        response_mask,
        config.loss_agg_mode,
        dp_size,
        batch_num_tokens,
        global_batch_size,
        config.loss_scale_factor,
    )
    return pg_loss, clipfrac.detach(), clipfrac_lower.detach(), ppo_kl.detach()


def _check_policy_inputs(
    hidden: torch.Tensor, targets: torch.Tensor, **per_token: torch.Tensor | None
) -> None:
    if targets.dim() != 2:
        raise ShapeMismatchError(f"targets must be [B, L], got shape {tuple(targets.shape)}")
    if hidden.dim() != 3 or hidden.shape[:2] != targets.shape:
        raise ShapeMismatchError(
            f"hidden must be [B, L, d] with [B, L] = {tuple(targets.shape)}, got {tuple(hidden.shape)}"
        )
    for name, t in per_token.items():
        if t is None:
            continue
        if t.shape != targets.shape:
            raise ShapeMismatchError(f"{name} must be [B, L] = {tuple(targets.shape)}, got {tuple(t.shape)}")
        if name != "response_mask" and not t.is_floating_point():
            raise DTypeMismatchError(f"{name} must be a float tensor, got {t.dtype}")


def fused_policy_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    config: PPOLossConfig | None = None,
    *,
    temperature: float = 1.0,
    bias: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    dp_size: int = 1,
    batch_num_tokens: int | torch.Tensor | None = None,
    global_batch_size: int | torch.Tensor | None = None,
    backend: Backend = "auto",
) -> PolicyLossOutput:
    """PPO policy loss straight from hidden states (see the module docstring for the picture).

    Shapes::

        hidden [B, L, d], weight [V, d], bias [V] | None, targets [B, L] (int),
        old_logprobs, advantages, response_mask, rollout_is_weights [B, L]  ->  loss []

    Raises:
        ShapeMismatchError / DTypeMismatchError / KernelInputError: bad input.
    """
    config = config or PPOLossConfig()
    _check_policy_inputs(
        hidden, targets, old_logprobs=old_logprobs, advantages=advantages,
        response_mask=response_mask, rollout_is_weights=rollout_is_weights,
    )  # fmt: skip
    b, length, d = hidden.shape
    keep = response_mask.reshape(-1) != 0
    if bool(keep.all()):  # no padding: skip the gather/scatter copies
        lp, ent = fused_logprob_entropy(hidden, weight, targets, temperature, bias, backend)
    else:
        idx = keep.nonzero().squeeze(1)
        lp_sel, ent_sel = fused_logprob_entropy(
            hidden.reshape(-1, d)[idx], weight, targets.reshape(-1)[idx], temperature, bias, backend
        )
        lp = lp_sel.new_zeros(b * length).index_copy(0, idx, lp_sel).view(b, length)
        ent = ent_sel.new_zeros(b * length).index_copy(0, idx, ent_sel).view(b, length)
    normalisers = (dp_size, batch_num_tokens, global_batch_size)
    pg_loss, clipfrac, clipfrac_lower, ppo_kl = ppo_clip_loss(
        lp,
        old_logprobs.to(lp.dtype),
        advantages.to(lp.dtype),
        response_mask,
        config,
        rollout_is_weights,
        *normalisers,
    )
    with torch.set_grad_enabled(torch.is_grad_enabled() and config.entropy_coeff != 0.0):
        # With no entropy bonus the entropy's gradient is never asked for, so its backward term is skipped.
        entropy_loss = agg_loss(
            ent, response_mask, config.loss_agg_mode, *normalisers, config.loss_scale_factor
        )
    loss = pg_loss - config.entropy_coeff * entropy_loss if config.entropy_coeff != 0.0 else pg_loss
    return PolicyLossOutput(
        loss=loss,
        pg_loss=pg_loss,
        entropy_loss=entropy_loss,
        logprobs=lp,
        entropy=ent,
        pg_clipfrac=clipfrac,
        pg_clipfrac_lower=clipfrac_lower,
        ppo_kl=ppo_kl,
    )
