"""The loss of one micro-batch, from the model's hidden states to the number `backward` takes.

Per-token log-probs and entropies come from the fused kernel (`arborl.kernels`): hidden
states of the response positions go through the LM head chunk by chunk, so the
``[tokens, vocab]`` logits are never materialised. Only tokens under the response mask are
sent through the head (`token_logprobs`)::

    input_ids   | pad p p p | r r r o o o r r | pad |
    hidden      |   h h h h   h h h h h h h     |      position t predicts token t+1
    scored      |         ^ ^ ^       ^ ^ ^     |      (mask 1 → gathered → kernel → scattered back)

The policy loss is verl's, looked up by name in its registry (`get_policy_loss_fn`:
vanilla, gspo, cispo, ...), aggregated by verl's `agg_loss` with global token / sequence
counts (`global_batch_info`) so that micro-batching does not change the loss. The loss of a
mini-batch is verl's actor loss (`verl.workers.utils.losses.ppo_loss`), each term aggregated
by `agg_loss` (`actor_loss`)::

    loss = pg_loss − entropy_coeff · H(π_θ) + kl_loss_coef · KL(π_θ ‖ π_ref)      (KL: use_kl_loss)

with the KL per token from verl's `kl_penalty` (``low_var_kl``: ``e^(ref−logp) − (ref−logp) − 1``,
clamped to [−10, 10]). The off-policy correction (`off_policy.py`) reaches the policy loss
as ``old_log_probs`` (what its ratio divides by), ``is_weights`` (per-token weights) and
``pg_mask`` (tokens the policy loss leaves out, still counted in its normaliser).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from verl.trainer.ppo import core_algos

from arborl.agents.vision import vision_token_bias
from arborl.kernels import fused_logprob_entropy

from .learner_config import LearnerConfig
from .prefix import response_hidden_states


def token_logprobs(
    model: Any, mb: dict[str, torch.Tensor], cfg: LearnerConfig, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and entropies ``[b, R]`` of the response tokens where `mask` (default: the
    loss mask) is set, 0 elsewhere."""
    # Position t predicts token t+1; a prompt prefix the rows share is computed once.
    min_shared = cfg.share_prefix_min if cfg.share_prefix_min > 0 else 1 << 30
    hidden = response_hidden_states(model, mb, min_shared=min_shared)
    mask = mb["response_mask"].bool() if mask is None else mask
    head = model.get_output_embeddings()
    bias = getattr(head, "bias", None)
    # a VLM's vision placeholder ids are out of the engine's distribution: out of this one too
    never = vision_token_bias(model, head.weight.shape[0], head.weight)
    if never is not None:
        bias = never if bias is None else bias + never
    lp, ent = fused_logprob_entropy(
        hidden[mask],
        head.weight,
        mb["responses"][mask],
        temperature=cfg.temperature,
        bias=bias,
        backend=cfg.kernel_backend,
    )
    logp = torch.zeros(mask.shape, dtype=lp.dtype, device=mask.device).masked_scatter(mask, lp)
    entropy = torch.zeros(mask.shape, dtype=ent.dtype, device=mask.device).masked_scatter(mask, ent)
    return logp, entropy


def global_batch_info(mask: torch.Tensor) -> dict[str, Any]:
    """The counts `agg_loss` normalises by: the mini-batch's, whichever micro-batch it sees."""
    return {
        "dp_size": 1,
        "batch_num_tokens": int(mask.sum().item()),
        "global_batch_size": int((mask.sum(-1) > 0).sum().item()),
        # seq-mean-token-sum-norm divides by the horizon: the batch's, not a micro-batch's.
        "loss_scale_factor": mask.shape[-1],
    }


@dataclass
class ActorLoss:
    """The loss of a micro-batch and its terms (each already aggregated by `agg_loss`)."""

    loss: torch.Tensor
    pg_loss: torch.Tensor
    entropy: torch.Tensor
    kl_loss: torch.Tensor | None  # None: use_kl_loss is off
    pg_metrics: dict[str, Any]  # the policy-loss function's own (clip fraction, ppo_kl, ...)


def actor_loss(
    loss_fn: Callable[..., Any],
    actor_cfg: Any,
    cfg: LearnerConfig,
    mb: dict[str, torch.Tensor],
    logp: torch.Tensor,
    ent: torch.Tensor,
) -> ActorLoss:
    """verl's actor loss of the micro-batch `mb` (needs ``old_log_probs`` and ``advantages``,
    ``ref_log_prob`` with use_kl_loss; ``is_weights``, ``pg_mask`` where the correction sets
    them), its log-probs `logp` and entropies `ent` under π_θ;
    `actor_cfg.global_batch_info` holds the mini-batch's counts (`global_batch_info`)."""
    m = mb["response_mask"].float()
    pg_mask = m * mb["pg_mask"] if "pg_mask" in mb else m
    if pg_mask.any():
        pg_loss, pg_metrics = loss_fn(
            mb["old_log_probs"],
            logp,
            mb["advantages"],
            pg_mask,
            cfg.loss_agg_mode,
            actor_cfg,
            rollout_is_weights=mb.get("is_weights"),
        )
    else:  # every token masked out of the policy loss (verl's losses refuse an empty mask)
        pg_loss, pg_metrics = (logp * 0).sum(), {}
    # verl's composition (verl.workers.utils.losses.ppo_loss):
    #   loss = pg_loss - entropy_coeff · entropy + kl_loss_coef · kl
    # each term aggregated by agg_loss over the mini-batch's tokens / sequences
    loss = pg_loss
    info = actor_cfg.global_batch_info
    ent_loss = core_algos.agg_loss(ent, m, cfg.loss_agg_mode, **info)
    if cfg.entropy_coeff:
        loss = loss - cfg.entropy_coeff * ent_loss
    kl_loss = None
    if cfg.use_kl_loss:
        kl = core_algos.kl_penalty(logp, mb["ref_log_prob"], cfg.kl_loss_type)
        kl_loss = core_algos.agg_loss(kl, m, cfg.loss_agg_mode, **info)
        loss = loss + cfg.kl_loss_coef * kl_loss
    return ActorLoss(loss, pg_loss, ent_loss, kl_loss, pg_metrics)
