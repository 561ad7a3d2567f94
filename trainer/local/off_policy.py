"""Off-policy corrections: every way the learner weights or masks tokens that an older policy
sampled, each a named option of `learner.correction` (one class each, registered below).

Notation, per response token t of sequence i (the loss mask's tokens, ``|y_i|`` of them)::

    log ρ_t = log π(y_t) − log π_behav(y_t)        π_behav: the policy that sampled the token
    ρ(y_i)  = Π_t ρ_t = exp(Σ_t log ρ_t)            the sequence's ratio
    ρ̄(y_i)  = ρ(y_i)^(1/|y_i|)                      its geometric mean per token

``π`` is the proximal policy ``π_prox`` (the weights as the update starts) for the
corrections that fix their weights before the update (``decoupled``, ``m2po``'s mask), and
the policy being trained ``π_θ`` for the ones that run in verl's bypass mode (the weights
recomputed from each forward, a REINFORCE loss ``−w · A · log π_θ`` with ``w`` detached, whose
gradient is the importance-weighted policy gradient)::

    name       weight w_t of a token                ratio               loss
    decoupled  min(ρ_t, C)                          ρ = π_prox/π_behav  PPO(π_θ/π_prox) · w
    none       (none; its ESS is that of ρ_t)       ρ = π_θ/π_behav     PPO(π_θ/π_behav)
    tis        min(ρ_t, C)                          ρ = π_θ/π_behav     −w · A · log π_θ
    seq_tis    min(ρ(y_i), C)                       ρ = π_θ/π_behav     −w · A · log π_θ
    seq_mis    ρ(y_i) · 1[l ≤ ρ(y_i) ≤ u]           ρ = π_θ/π_behav     −w · A · log π_θ
    geo_mask   min(ρ_t, C) · 1[l ≤ ρ̄(y_i) ≤ u]      ρ = π_θ/π_behav     −w · A · log π_θ
    m2po       ρ_t · M_t (M: second-moment mask)    ρ = π_θ/π_behav     −w · A · log π_θ

A masked token (weight 0) still counts in the loss's normaliser (``token-mean`` divides by
all the mini-batch's tokens), as the estimators' 1/N says. Every update logs the batch's
effective sample size of these weights (`effective_sample_size`) as ``offpolicy/ess``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from verl.trainer.ppo.rollout_corr_helper import (
    SAFETY_BOUND,
    compute_rollout_correction_and_rejection_mask,
    compute_rollout_correction_weights,
)

if TYPE_CHECKING:
    from verl.trainer.config import RolloutCorrectionConfig

    from .learner_config import LearnerConfig

Level = Literal["token", "sequence"]


class Correction:
    """One off-policy correction: its weights, what it puts in the batch before the update,
    and whether it runs in verl's bypass mode (`verl_config`)."""

    name: ClassVar[str]
    level: ClassVar[Level] = "token"  # what one importance weight belongs to (ESS counts these)
    needs_proximal: ClassVar[bool] = False  # π_prox over the batch before the first step
    reusable: ClassVar[bool] = False  # a micro-batch's own forward gives its weights exactly

    def weights(self, log_ratio: torch.Tensor, mask: torch.Tensor, cfg: LearnerConfig) -> torch.Tensor:
        """The weight ``[B, R]`` of every token from ``log ρ`` (0 off the mask)."""
        rc = self.verl_config(cfg)
        assert rc is not None, f"{self.name} defines neither weights nor a verl config"
        return verl_weights(rc, log_ratio, mask)

    def verl_config(self, cfg: LearnerConfig) -> RolloutCorrectionConfig | None:
        """verl's bypass-mode configuration, for corrections whose loss is verl's bypass mode
        (None: the configured `loss_mode` on ``old_log_probs``)."""
        return None

    def prepare(
        self, prox: torch.Tensor | None, behav: torch.Tensor, mask: torch.Tensor, cfg: LearnerConfig
    ) -> dict[str, torch.Tensor]:
        """What the batch needs before the update: ``old_log_probs`` (what the loss's ratio
        divides by), and ``is_weights`` or ``pg_mask`` where the correction has them."""
        return {"old_log_probs": behav}

    def extra_metrics(
        self, log_ratio: torch.Tensor, mask: torch.Tensor, cfg: LearnerConfig
    ) -> dict[str, float]:
        return {}


CORRECTIONS: dict[str, Correction] = {}


def register_correction(cls: type[Correction]) -> type[Correction]:
    """Class decorator: `learner.correction` accepts ``cls.name`` from now on."""
    CORRECTIONS[cls.name] = cls()
    return cls


def get_correction(name: str) -> Correction:
    """The correction registered as `name`; an unknown name's error lists the known ones."""
    try:
        return CORRECTIONS[name]
    except KeyError:
        raise ValueError(
            f"learner.correction={name!r} is not a known off-policy correction; use one of "
            f"{', '.join(CORRECTIONS)} (e.g. learner.correction=tis; each is described in "
            "trainer/local/off_policy.py and docs/trainer.md)"
        ) from None


def verl_weights(rc: RolloutCorrectionConfig, log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The weights verl's bypass mode puts on each token under `rc`: its IS weights (1 without
    them) times its rejection mask, from the same verl function the loss calls."""
    if not mask.any():  # verl refuses a batch without tokens
        return torch.zeros_like(log_ratio)
    proto, kept, _ = compute_rollout_correction_and_rejection_mask(
        old_log_prob=log_ratio * mask,
        rollout_log_prob=torch.zeros_like(log_ratio),
        response_mask=mask,
        rollout_is=rc.rollout_is,
        rollout_is_threshold=rc.rollout_is_threshold,
        rollout_rs=rc.rollout_rs,
        rollout_rs_threshold=rc.rollout_rs_threshold,
    )
    w = proto.batch["rollout_is_weights"] if proto is not None else mask
    return w * kept


def _bypass(**kw: Any) -> RolloutCorrectionConfig:
    from verl.trainer.config import RolloutCorrectionConfig

    return RolloutCorrectionConfig(loss_type="reinforce", bypass_mode=True, **kw)


@register_correction
class Decoupled(Correction):
    """Decoupled PPO (AReaL): PPO clips ``π_θ/π_prox`` and each token is weighted by the
    truncated behaviour ratio ``w_t = min(π_prox/π_behav, C)`` (``C = learner.is_threshold``;
    verl's `compute_rollout_correction_weights`, token level)."""

    name = "decoupled"
    needs_proximal = True
    reusable = True

    def weights(self, log_ratio: torch.Tensor, mask: torch.Tensor, cfg: LearnerConfig) -> torch.Tensor:
        w, _ = compute_rollout_correction_weights(
            log_ratio * mask, mask, rollout_is="token", rollout_is_threshold=cfg.is_threshold
        )
        return w

    def prepare(
        self, prox: torch.Tensor | None, behav: torch.Tensor, mask: torch.Tensor, cfg: LearnerConfig
    ) -> dict[str, torch.Tensor]:
        assert prox is not None
        return {"old_log_probs": prox, "is_weights": self.weights(prox - behav, mask, cfg)}

    def extra_metrics(
        self, log_ratio: torch.Tensor, mask: torch.Tensor, cfg: LearnerConfig
    ) -> dict[str, float]:
        _, is_metrics = compute_rollout_correction_weights(
            log_ratio * mask, mask, rollout_is="token", rollout_is_threshold=cfg.is_threshold
        )
        return {f"offpolicy/{k}": float(v) for k, v in is_metrics.items()}


@register_correction
class NoCorrection(Correction):
    """None: PPO around the behaviour policy itself (``π_prox := π_behav``), the clip its only
    trust region. Its ESS is that of the raw ratios ``ρ_t = π_θ/π_behav``, what an untruncated
    IS would weight by."""

    name = "none"

    def weights(self, log_ratio: torch.Tensor, mask: torch.Tensor, cfg: LearnerConfig) -> torch.Tensor:
        return torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)) * mask


@register_correction
class TokenTIS(Correction):
    """Token-level truncated IS on a REINFORCE loss: ``w_t = min(π_θ/π_behav, C)``,
    ``loss = −w · A · log π_θ`` (verl's bypass mode, ``rollout_is=token``)."""

    name = "tis"

    def verl_config(self, cfg: LearnerConfig) -> RolloutCorrectionConfig:
        return _bypass(rollout_is="token", rollout_is_threshold=cfg.is_threshold)


@register_correction
class SequenceTIS(Correction):
    """Sequence-level truncated IS: one weight per sequence, the product of its token ratios
    truncated at C, ``w_i = min(Π_t π_θ/π_behav, C)`` on every token of it (verl's
    ``rollout_is=sequence``; the log-ratio sum is clamped to ±20 before ``exp``)."""

    name = "seq_tis"
    level = "sequence"

    def verl_config(self, cfg: LearnerConfig) -> RolloutCorrectionConfig:
        return _bypass(rollout_is="sequence", rollout_is_threshold=cfg.is_threshold)


@register_correction
class SequenceMIS(Correction):
    """Sequence-level masked IS: the sequence's ratio kept where it stays within
    ``[l, u] = learner.seq_mis_bounds`` and the whole sequence dropped (weight 0) otherwise,
    ``w_i = ρ(y_i) · 1[l ≤ ρ(y_i) ≤ u]`` (verl's ``rollout_is=sequence`` with a
    ``"l_u"`` threshold, its IcePop form)."""

    name = "seq_mis"
    level = "sequence"

    def verl_config(self, cfg: LearnerConfig) -> RolloutCorrectionConfig:
        lo, hi = cfg.seq_mis_bounds
        return _bypass(rollout_is="sequence", rollout_is_threshold=f"{lo!r}_{hi!r}")


@register_correction
class GeometricMask(Correction):
    """Token TIS within the sequences whose per-token geometric-mean ratio stays in
    ``[l, u] = learner.geo_mask_bounds``: ``w_t = min(ρ_t, C) · 1[l ≤ exp(mean_t log ρ_t) ≤ u]``.
    The geometric mean does not grow with length as the product does, so one bound suits
    short and long replies (verl's ``seq_mean_k1`` rejection, "Geo-RS")."""

    name = "geo_mask"

    def verl_config(self, cfg: LearnerConfig) -> RolloutCorrectionConfig:
        lo, hi = cfg.geo_mask_bounds
        # verl's seq_mean_k1 bounds mean(−log ρ) by [log a, log b]: l ≤ ρ̄ ≤ u is a = 1/u, b = 1/l
        # (passing [l, u] would keep [1/u, 1/l], the wrong interval for asymmetric bounds).
        return _bypass(
            rollout_is="token",
            rollout_is_threshold=cfg.is_threshold,
            rollout_rs="seq_mean_k1",
            rollout_rs_threshold=f"{1.0 / hi!r}_{1.0 / lo!r}",
        )


@register_correction
class M2PO(Correction):
    """M2PO (Zheng et al. 2025, "Prosperity before Collapse"): a trust region on the second
    moment of the log-ratio instead of a clip. With ``M2_t = (log π_prox/π_behav)²`` over the
    batch's N tokens, the tokens of largest ``M2_t`` are masked, fewest first, until the mean
    over the rest is at most ``τ = learner.m2_threshold`` (the paper's 0.04)::

        sort M2 descending: m_1 ≥ m_2 ≥ ... ≥ m_N
        k = min{k : mean(m_{k+1} .. m_N) ≤ τ}       (k = N when no k leaves a mean ≤ τ)
        M_t = 0 for the k largest, 1 for the rest

    and the objective is the paper's unclipped ``(1/N) Σ M_t · ρ_t · A_t`` with
    ``ρ_t = π_θ/π_behav``: verl's bypass REINFORCE with untruncated token weights (the same
    gradient) on the tokens M keeps. The mask is fixed once per update from ``π_prox`` (the
    weights as the update starts, so the policy a no-grad pass gives before the first step).
    verl has no second-moment mask: `m2po_mask` is written here."""

    name = "m2po"
    needs_proximal = True

    def verl_config(self, cfg: LearnerConfig) -> RolloutCorrectionConfig:
        # untruncated: verl already caps log ρ at ±SAFETY_BOUND before exp
        return _bypass(rollout_is="token", rollout_is_threshold=math.exp(SAFETY_BOUND))

    def weights(self, log_ratio: torch.Tensor, mask: torch.Tensor, cfg: LearnerConfig) -> torch.Tensor:
        return super().weights(log_ratio, mask, cfg) * m2po_mask(log_ratio, mask, cfg.m2_threshold)

    def prepare(
        self, prox: torch.Tensor | None, behav: torch.Tensor, mask: torch.Tensor, cfg: LearnerConfig
    ) -> dict[str, torch.Tensor]:
        assert prox is not None
        return {"old_log_probs": behav, "pg_mask": m2po_mask(prox - behav, mask, cfg.m2_threshold)}

    def extra_metrics(
        self, log_ratio: torch.Tensor, mask: torch.Tensor, cfg: LearnerConfig
    ) -> dict[str, float]:
        keep = m2po_mask(log_ratio, mask, cfg.m2_threshold)
        m2 = log_ratio.double() ** 2
        return {
            "offpolicy/m2": float((m2 * mask).sum() / mask.sum().clamp(min=1)),
            "offpolicy/m2_kept": float((m2 * keep).sum() / keep.sum().clamp(min=1)),
            "offpolicy/m2po_masked_fraction": float(1 - keep.sum() / mask.sum().clamp(min=1)),
        }


def m2po_mask(log_ratio: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """M2PO's mask ``[B, R]`` (1: kept) over all the batch's tokens under `mask`: the fewest
    tokens of largest ``(log ρ)²`` masked so that the mean over the rest is ≤ `threshold`."""
    valid = mask.bool()
    m2 = log_ratio.double()[valid] ** 2
    n = m2.numel()
    keep = torch.zeros_like(mask)
    if n == 0:
        return keep
    order = torch.argsort(m2, descending=True, stable=True)
    sorted_m2 = m2[order]
    # suffix mean after masking the k largest, for k = 0 .. n-1
    suffix_mean = sorted_m2.flip(0).cumsum(0).flip(0) / torch.arange(n, 0, -1, dtype=m2.dtype)
    ok = torch.nonzero(suffix_mean <= threshold)
    k = int(ok[0]) if len(ok) else n
    kept = torch.ones(n, dtype=mask.dtype, device=mask.device)
    kept[order[:k]] = 0
    keep[valid] = kept
    return keep


def effective_sample_size(weights: torch.Tensor, mask: torch.Tensor, level: Level = "token") -> float:
    """Kish's effective sample size of the importance weights, normalised to (0, 1]::

        ESS = (Σ_n w_n)² / (N · Σ_n w_n²)

    over the N samples: the tokens under `mask` (``level="token"``), or the sequences with a
    token under it, each with its one weight (``"sequence"``). 1 when every weight is equal
    (on-policy), → 1/N when one sample carries them all; 0 when every weight is 0."""
    w = weights.double()
    m = mask.double()
    if level == "sequence":
        rows = m.sum(-1) > 0
        w = ((w * m).sum(-1) / m.sum(-1).clamp(min=1))[rows]
    else:
        w = w[m > 0]
    n, total, squares = w.numel(), w.sum(), (w * w).sum()
    return float(total * total / (n * squares)) if n and squares > 0 else 0.0


def batch_metrics(
    correction: Correction, start: torch.Tensor, behav: torch.Tensor, mask: torch.Tensor, cfg: LearnerConfig
) -> dict[str, float]:
    """What an update logs of its correction: the weights as the update first applied them
    (from `start`, the log-probs as each row's first step saw them) and their ESS."""
    m = mask.float()
    log_ratio = (start - behav) * m
    w = correction.weights(log_ratio, m, cfg)
    count = m.sum().clamp(min=1)
    out = {
        "offpolicy/ess": effective_sample_size(w, m, correction.level),
        "offpolicy/log_ratio_abs_mean": float((log_ratio.abs() * m).sum() / count),
        "offpolicy/weight_mean": float((w * m).sum() / count),
        "offpolicy/zero_weight_fraction": float(((w == 0) & (m > 0)).sum() / count),
    }
    out.update(correction.extra_metrics(log_ratio, m, cfg))
    return out
