"""fused_policy_loss against verl's compute_policy_loss_vanilla + agg_loss (value, metrics, grads)."""

from __future__ import annotations

import pytest
import torch
from kernels_testlib import max_rel_err

from arborl.kernels import (
    AGG_LOSSES,
    KernelInputError,
    PPOLossConfig,
    ShapeMismatchError,
    fused_policy_loss,
    materialized_logprob_entropy,
)

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
ActorConfig = pytest.importorskip("verl.workers.config").ActorConfig

MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean"]
B, L, D, V, T = 4, 9, 8, 50, 0.8


def make_batch(dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, L, D, generator=g, dtype=dtype)
    weight = torch.randn(V, D, generator=g, dtype=dtype) * 0.7
    bias = torch.randn(V, generator=g, dtype=dtype) * 0.3
    targets = torch.randint(0, V, (B, L), generator=g)
    mask = torch.ones(B, L)
    mask[0, 6:] = 0  # right padding
    mask[1, :2] = 0  # a masked prefix
    mask[2] = 0  # a fully masked sequence (dropped by the seq-mean modes)
    with torch.no_grad():
        logp, _ = materialized_logprob_entropy(hidden, weight, targets, T, bias)
    # old log-probs far enough off that both clips and the dual clip fire
    old = (logp + torch.randn(B, L, generator=g, dtype=dtype) * 0.8).to(dtype)
    adv = torch.randn(B, L, generator=g, dtype=dtype)
    is_weights = torch.rand(B, L, generator=g, dtype=dtype) + 0.5
    return hidden, weight, bias, targets, old, adv, mask, is_weights


def verl_loss(
    hidden, weight, bias, targets, old, adv, mask, mode, entropy_coeff, is_weights=None, **global_info
):
    cfg = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=0.2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        clip_ratio_c=3.0,
        loss_agg_mode=mode,
    )
    cfg.global_batch_info.update(global_info)
    logp, ent = materialized_logprob_entropy(hidden, weight, targets, T, bias)
    pg_loss, metrics = core_algos.get_policy_loss_fn("vanilla")(
        old, logp, adv, mask, mode, cfg, rollout_is_weights=is_weights
    )
    entropy_loss = core_algos.agg_loss(ent, mask, mode, **cfg.global_batch_info)
    return pg_loss - entropy_coeff * entropy_loss, metrics, entropy_loss


def ours(hidden, weight, bias, targets, old, adv, mask, mode, entropy_coeff, is_weights=None, **global_info):
    cfg = PPOLossConfig(
        clip_ratio=0.2,
        clip_ratio_high=0.28,
        clip_ratio_c=3.0,
        loss_agg_mode=mode,
        entropy_coeff=entropy_coeff,
    )
    return fused_policy_loss(
        hidden, weight, targets, old, adv, mask, cfg, temperature=T, bias=bias,
        rollout_is_weights=is_weights, **global_info,
    )  # fmt: skip


def grads(loss, leaves):
    return torch.autograd.grad(loss, leaves)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("entropy_coeff", [0.0, 0.05])
def test_matches_verl(mode, entropy_coeff):
    hidden, weight, bias, targets, old, adv, mask, _ = make_batch()
    leaves = [x.requires_grad_() for x in (hidden, weight, bias)]
    ref_loss, ref_metrics, ref_ent = verl_loss(
        hidden, weight, bias, targets, old, adv, mask, mode, entropy_coeff
    )
    out = ours(hidden, weight, bias, targets, old, adv, mask, mode, entropy_coeff)

    assert abs(out.loss.item() - ref_loss.item()) < 1e-12
    assert abs(out.entropy_loss.item() - ref_ent.item()) < 1e-12
    m = out.metrics()
    for key in ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"):
        assert abs(m[key] - ref_metrics[key]) < 1e-12, key
    # the batch exercises every branch of the surrogate
    assert 0 < m["actor/pg_clipfrac"] < 1 and m["actor/pg_clipfrac_lower"] > 0

    for name, a, e in zip(
        ("hidden", "weight", "bias"), grads(out.loss, leaves), grads(ref_loss, leaves), strict=True
    ):
        assert max_rel_err(a, e) < 1e-10, name
        assert a.abs().max() > 0, name


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_global_normalisers_and_importance_weights(mode):
    """dp_size > 1 with global token / sequence counts, and rollout importance weights."""
    hidden, weight, bias, targets, old, adv, mask, is_w = make_batch(seed=1)
    leaves = [x.requires_grad_() for x in (hidden, weight, bias)]
    info = {"dp_size": 2, "batch_num_tokens": 40, "global_batch_size": 7}
    ref_loss, _, _ = verl_loss(hidden, weight, bias, targets, old, adv, mask, mode, 0.01, is_w, **info)
    out = ours(hidden, weight, bias, targets, old, adv, mask, mode, 0.01, is_w, **info)
    assert abs(out.loss.item() - ref_loss.item()) < 1e-12
    for a, e in zip(grads(out.loss, leaves), grads(ref_loss, leaves), strict=True):
        assert max_rel_err(a, e) < 1e-10


def test_float32_bool_mask_and_masked_positions():
    hidden, weight, bias, targets, old, adv, mask, _ = make_batch(torch.float32, seed=2)
    bool_mask = mask.bool()
    leaves = [x.requires_grad_() for x in (hidden, weight, bias)]
    out = ours(hidden, weight, bias, targets, old, adv, bool_mask, "token-mean", 0.01)
    ref_loss, _, _ = verl_loss(hidden, weight, bias, targets, old, adv, bool_mask, "token-mean", 0.01)
    assert abs(out.loss.item() - ref_loss.item()) < 1e-5
    got = grads(out.loss, leaves)
    for a, e in zip(got, grads(ref_loss, leaves), strict=True):
        assert max_rel_err(a, e) < 1e-4
    assert torch.all(out.logprobs[~bool_mask] == 0) and torch.all(out.entropy[~bool_mask] == 0)
    # hidden states of masked positions get no gradient: they never went through the head
    assert torch.all(got[0][~bool_mask] == 0) and got[0][bool_mask].abs().sum() > 0


def test_config_and_shape_errors():
    with pytest.raises(KernelInputError, match="clip_ratio_c"):
        PPOLossConfig(clip_ratio_c=1.0)
    with pytest.raises(KernelInputError, match="loss_agg_mode"):
        PPOLossConfig(loss_agg_mode="mean")
    assert set(MODES) == set(AGG_LOSSES)
    hidden, weight, _bias, targets, old, adv, mask, _ = make_batch()
    with pytest.raises(ShapeMismatchError, match="advantages"):
        fused_policy_loss(hidden, weight, targets, old, adv[:, :-1], mask)
    with pytest.raises(ShapeMismatchError, match="hidden"):
        fused_policy_loss(hidden[:, :-1], weight, targets, old, adv, mask)
    with pytest.raises(KernelInputError, match="batch_num_tokens"):
        fused_policy_loss(hidden, weight, targets, old, adv, mask, dp_size=2)
