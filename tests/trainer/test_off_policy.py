"""Off-policy corrections (`trainer/local/off_policy.py`): each option's weights, and the loss
the learner trains with, against a plain loop over the paper's equation written here; the
batch's effective sample size against its formula; the staleness throttle; an unknown name's
error at start; and a short async run with each new correction."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch
from arith_suite import generate, train_config
from verl.trainer.ppo import core_algos

from arborl.cli.config import ConfigError
from arborl.cli.train_cmds import compose_train
from arborl.trainer.local.actor_loss import actor_loss, global_batch_info
from arborl.trainer.local.checkpoint import Checkpointer
from arborl.trainer.local.config import AsyncConfig
from arborl.trainer.local.learner_config import LearnerConfig, policy_loss_mode, verl_actor_config
from arborl.trainer.local.metrics_log import read_metrics
from arborl.trainer.local.off_policy import (
    CORRECTIONS,
    batch_metrics,
    effective_sample_size,
    get_correction,
)
from arborl.trainer.local.rollout import dispatch_limit
from arborl.trainer.local.staleness import StalenessBound
from arborl.trainer.local.trainer import Trainer

C = 2.0
SEQ_BOUNDS = (0.5, 2.0)
GEO_BOUNDS = (0.85, 1.3)  # asymmetric: reading the interval upside down keeps other rows
TAU = 0.04
CFG = LearnerConfig(is_threshold=C, seq_mis_bounds=SEQ_BOUNDS, geo_mask_bounds=GEO_BOUNDS, m2_threshold=TAU)
SHIFTS = [0.0, -0.2, 0.2, 0.27, -0.5, 0.05, 0.9]  # each row's log-ratio offset


def batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log π, log π_behav, mask) ``[7, 12]``: multi-turn rows (a gap of observation tokens
    inside the response), right padding, log-ratios of several sizes around per-row offsets."""
    g = torch.Generator().manual_seed(seed)
    b, r = len(SHIFTS), 12
    mask = torch.zeros(b, r)
    for i in range(b):
        n = 3 + (5 * i + seed) % 9
        mask[i, :n] = 1
        if i % 2 == 0 and n > 5:
            mask[i, 2:4] = 0  # the tool's reply between two turns
    behav = -torch.rand(b, r, generator=g) * 3 - 0.1
    noise = torch.randn(b, r, generator=g) * torch.tensor([0.05, 0.1, 0.3, 0.1, 0.2, 0.6, 0.05]).unsqueeze(1)
    log_ratio = (torch.tensor(SHIFTS).unsqueeze(1) + noise) * mask
    return behav + log_ratio, behav, mask


def tokens_of(log_ratio: torch.Tensor, mask: torch.Tensor) -> list[list[tuple[int, float]]]:
    """Per sequence, its (position, log ρ_t) on the mask, as plain floats."""
    lr, m = log_ratio.tolist(), mask.tolist()
    return [[(t, lr[i][t]) for t in range(len(m[i])) if m[i][t]] for i in range(len(m))]


# ---- the papers' equations, one plain loop each -----------------------------------------
def ref_token_tis(seqs, shape):  # w_t = min(ρ_t, C)
    w = [[0.0] * shape[1] for _ in range(shape[0])]
    for i, seq in enumerate(seqs):
        for t, lr in seq:
            w[i][t] = min(math.exp(lr), C)
    return w


def ref_none(seqs, shape):  # the raw ratio ρ_t
    w = [[0.0] * shape[1] for _ in range(shape[0])]
    for i, seq in enumerate(seqs):
        for t, lr in seq:
            w[i][t] = math.exp(lr)
    return w


def ref_seq_tis(seqs, shape):  # w_i = min(Π_t ρ_t, C)
    w = [[0.0] * shape[1] for _ in range(shape[0])]
    for i, seq in enumerate(seqs):
        rho = 1.0
        for _, lr in seq:
            rho *= math.exp(lr)
        for t, _ in seq:
            w[i][t] = min(rho, C)
    return w


def ref_seq_mis(seqs, shape):  # w_i = ρ(y_i) if l <= ρ(y_i) <= u else 0
    w = [[0.0] * shape[1] for _ in range(shape[0])]
    lo, hi = SEQ_BOUNDS
    for i, seq in enumerate(seqs):
        rho = 1.0
        for _, lr in seq:
            rho *= math.exp(lr)
        for t, _ in seq:
            w[i][t] = rho if lo <= rho <= hi else 0.0
    return w


def ref_geo_mask(seqs, shape):  # w_t = min(ρ_t, C) if l <= (Π ρ_t)^(1/|y|) <= u else 0
    w = [[0.0] * shape[1] for _ in range(shape[0])]
    lo, hi = GEO_BOUNDS
    for i, seq in enumerate(seqs):
        rho = 1.0
        for _, lr in seq:
            rho *= math.exp(lr)
        geo = rho ** (1 / len(seq))
        for t, lr in seq:
            w[i][t] = min(math.exp(lr), C) if lo <= geo <= hi else 0.0
    return w


def ref_m2po_kept(seqs) -> set[tuple[int, int]]:
    """M2PO's Algorithm: while the kept tokens' mean (log ρ)² is above τ, mask the largest."""
    kept = sorted(((lr * lr, i, t) for i, seq in enumerate(seqs) for t, lr in seq), reverse=True)
    while kept and sum(m2 for m2, _, _ in kept) / len(kept) > TAU:
        kept.pop(0)
    return {(i, t) for _, i, t in kept}


def ref_m2po(seqs, shape):  # w_t = ρ_t · M_t
    w = [[0.0] * shape[1] for _ in range(shape[0])]
    kept = ref_m2po_kept(seqs)
    for i, seq in enumerate(seqs):
        for t, lr in seq:
            w[i][t] = math.exp(lr) if (i, t) in kept else 0.0
    return w


REFERENCES = {
    "decoupled": ref_token_tis,
    "none": ref_none,
    "tis": ref_token_tis,
    "seq_tis": ref_seq_tis,
    "seq_mis": ref_seq_mis,
    "geo_mask": ref_geo_mask,
    "m2po": ref_m2po,
}
BYPASS = ["tis", "seq_tis", "seq_mis", "geo_mask", "m2po"]


def test_every_correction_has_a_reference_here():
    assert set(REFERENCES) == set(CORRECTIONS)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", list(REFERENCES))
def test_weights_are_the_papers_equation(name, seed):
    logp, behav, mask = batch(seed)
    lr = (logp - behav) * mask
    ref = torch.tensor(REFERENCES[name](tokens_of(lr, mask), mask.shape))
    ours = get_correction(name).weights(lr, mask, CFG)
    torch.testing.assert_close(ours.double(), ref.double(), rtol=1e-5, atol=1e-6)


def test_the_batch_exercises_both_sides_of_every_rule():
    """The references keep some and drop or truncate some, so a wrong rule shows."""
    logp, behav, mask = batch(0)
    seqs, shape = tokens_of((logp - behav) * mask, mask), mask.shape
    rows = range(shape[0])
    seq_w = [max(row) for row in ref_seq_mis(seqs, shape)]
    assert 0 < sum(w == 0 for w in seq_w) < len(seq_w)
    geo_w = [max(row) for row in ref_geo_mask(seqs, shape)]
    assert 0 < sum(w == 0 for w in geo_w) < len(geo_w)
    # upside down ([1/u, 1/l]) the geometric mask would keep other rows
    flipped = [
        (1 / GEO_BOUNDS[1]) <= math.exp(sum(lr for _, lr in seqs[i]) / len(seqs[i])) <= 1 / GEO_BOUNDS[0]
        for i in rows
    ]
    assert flipped != [w > 0 for w in geo_w]
    assert any(max(row) == C for row in ref_seq_tis(seqs, shape))
    assert any(min(row) < C and max(row) > 0 for row in ref_seq_tis(seqs, shape))
    assert any(w == C for row in ref_token_tis(seqs, shape) for w in row)
    n = sum(len(s) for s in seqs)
    assert 0 < len(ref_m2po_kept(seqs)) < n


@pytest.mark.parametrize("name", BYPASS)
def test_the_loss_the_learner_trains_with_applies_the_weights(name):
    """The policy loss of a micro-batch as the learner computes it (verl's loss from the
    correction's config, M2PO's mask in the batch) is ``−(1/N) Σ w_t A_t log π_t`` with the
    reference's weights, and so is its gradient."""
    logp, behav, mask = batch(1)
    g = torch.Generator().manual_seed(5)
    adv = torch.randn(mask.shape[0], 1, generator=g) * mask
    cfg = CFG.model_copy(update={"correction": name})
    actor_cfg = verl_actor_config(cfg)
    actor_cfg.global_batch_info.update(global_batch_info(mask))
    loss_fn = core_algos.get_policy_loss_fn(policy_loss_mode(cfg))
    mb = {"response_mask": mask, "advantages": adv, "rollout_log_probs": behav}
    mb.update(get_correction(name).prepare(logp, behav, mask, cfg))
    theta = logp.clone().requires_grad_(True)
    out = actor_loss(loss_fn, actor_cfg, cfg, mb, theta, torch.zeros_like(logp))
    out.pg_loss.backward()

    w = REFERENCES[name](tokens_of((logp - behav) * mask, mask), mask.shape)
    n = int(mask.sum())
    a, lp, m = adv.tolist(), logp.tolist(), mask.tolist()
    loss, grad = 0.0, [[0.0] * len(m[0]) for _ in m]
    for i in range(len(m)):
        for t in range(len(m[i])):
            if m[i][t]:
                loss -= w[i][t] * a[i][t] * lp[i][t] / n
                grad[i][t] = -w[i][t] * a[i][t] / n
    assert float(out.pg_loss.detach()) == pytest.approx(loss, rel=1e-5, abs=1e-7)
    torch.testing.assert_close(theta.grad.double(), torch.tensor(grad).double(), rtol=1e-5, atol=1e-8)


def test_decoupled_weights_the_ppo_loss_by_the_proximal_ratio():
    logp, behav, mask = batch(2)
    prepared = get_correction("decoupled").prepare(logp, behav, mask, CFG)
    assert prepared["old_log_probs"] is logp
    ref = ref_token_tis(tokens_of((logp - behav) * mask, mask), mask.shape)
    torch.testing.assert_close(
        prepared["is_weights"].double(), torch.tensor(ref).double(), rtol=1e-5, atol=1e-6
    )
    assert get_correction("none").prepare(None, behav, mask, CFG) == {"old_log_probs": behav}


# ---- effective sample size ----------------------------------------------------------------
def ref_ess(samples: list[float]) -> float:
    total = sum(samples)
    squares = sum(w * w for w in samples)
    return total * total / (len(samples) * squares)


def test_ess_is_kish_formula_over_tokens_or_sequences():
    g = torch.Generator().manual_seed(3)
    _, _, mask = batch(0)
    w = torch.rand(mask.shape, generator=g) * 3 * mask
    tokens = [w[i, t].item() for i in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[i, t]]
    assert effective_sample_size(w, mask) == pytest.approx(ref_ess(tokens), rel=1e-9)
    per_row = torch.rand(mask.shape[0], 1, generator=g) * mask  # one weight a sequence
    rows = [per_row[i, 0].item() for i in range(mask.shape[0])]
    assert effective_sample_size(per_row, mask, "sequence") == pytest.approx(ref_ess(rows), rel=1e-9)
    assert effective_sample_size(mask * 0.7, mask) == pytest.approx(1.0)  # on-policy: all equal
    one = torch.zeros_like(mask)
    one[0, 0] = 5.0
    assert effective_sample_size(one, mask) == pytest.approx(1 / mask.sum().item())
    assert effective_sample_size(torch.zeros_like(mask), mask) == 0.0


@pytest.mark.parametrize("name", ["seq_mis", "m2po", "none"])
def test_an_update_logs_the_ess_of_the_corrections_weights(name):
    logp, behav, mask = batch(0)
    corr = get_correction(name)
    seqs = tokens_of((logp - behav) * mask, mask)
    w = REFERENCES[name](seqs, mask.shape)
    if corr.level == "sequence":
        samples = [w[i][seq[0][0]] for i, seq in enumerate(seqs)]
    else:
        samples = [w[i][t] for i, seq in enumerate(seqs) for t, _ in seq]
    metrics = batch_metrics(corr, logp, behav, mask, CFG)
    assert metrics["offpolicy/ess"] == pytest.approx(ref_ess(samples), rel=1e-5)
    assert 0 < metrics["offpolicy/ess"] <= 1


# ---- the staleness throttle ---------------------------------------------------------------
def test_low_ess_lowers_the_staleness_bound_by_one_and_recovery_restores_it():
    bound = StalenessBound(AsyncConfig(max_staleness=3, ess_throttle=0.5, ess_restore=0.7))
    seen = [0.9, 0.4, 0.4, 0.6, 0.8, 0.3, 0.3, 0.3, 0.3, None, 0.9, 0.9, 0.9, 0.9]
    bounds = [bound.observe(ess) for ess in seen]
    assert bounds == [3, 2, 1, 1, 2, 1, 0, 0, 0, 0, 1, 2, 3, 3]
    again = StalenessBound(AsyncConfig(max_staleness=3, ess_throttle=0.5, ess_restore=0.7))
    assert again.replay({"offpolicy/ess": e} for e in seen[:7]) == 0  # a resumed run starts there
    # the rollouts obey it: one version ahead less per step lowered
    a = AsyncConfig(max_staleness=3)
    assert dispatch_limit(a, 4, 10) == (10 + 3 + 1) * 4
    assert dispatch_limit(a, 4, 10, bound=1) == (10 + 1 + 1) * 4
    off = StalenessBound(AsyncConfig(max_staleness=2))
    assert not off.throttled and [off.observe(e) for e in (0.0, 0.1)] == [2, 2]


def test_throttle_settings_are_checked_at_start():
    with pytest.raises(ValueError, match="sync mode does not have"):
        AsyncConfig(mode="sync", ess_throttle=0.5)
    with pytest.raises(ValueError, match="ess_restore >= ess_throttle"):
        AsyncConfig(ess_throttle=0.5, ess_restore=0.3)
    with pytest.raises(ValueError, match=r"needs async\.ess_throttle"):
        AsyncConfig(ess_restore=0.5)


# ---- an unknown name ------------------------------------------------------------------------
def test_an_unknown_correction_fails_at_start_naming_the_known_ones():
    with pytest.raises(ConfigError) as err:
        compose_train(["learner.correction=token_tis"])
    text = str(err.value)
    assert "learner.correction" in text and "'token_tis' is not a known off-policy correction" in text
    assert all(name in text for name in CORRECTIONS)
    with pytest.raises(ValueError, match="bounds"):
        LearnerConfig(geo_mask_bounds=(1.2, 0.8))


# ---- a short async run with each new correction ----------------------------------------------
def coin_tasks(n: int, seed: int) -> list:
    """The arithmetic tasks scored by a hash of the answer (`coin_verifier`): an untrained
    model's groups then hold successes and failures, so every batch trains."""
    return [t.model_copy(update={"verifier": "coin_verifier:coin"}) for t in generate(n, seed)]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["seq_tis", "seq_mis", "geo_mask", "m2po"])
def test_a_short_async_run_trains_with_the_correction(tmp_path, name):
    """Two async RL steps (three for m2po, which also throttles: any ESS below 1 lowers the
    bound), each training on its batch and logging the ESS of its weights."""
    throttle = name == "m2po"
    run = tmp_path / name
    cfg = train_config(
        run,
        tasks={"train": "test_off_policy:coin_tasks"},
        sft={"steps": 0},
        learner={"correction": name},
        run={"steps": 3 if throttle else 2, "eval_every": 100, "checkpoint_every": 100},
        **{"async": {"mode": "async", "max_staleness": 1, **({"ess_throttle": 1.0} if throttle else {})}},
    )
    asyncio.run(Trainer(cfg).run())
    rl = [e for e in read_metrics(run) if e["phase"] == "rl"]
    assert [e["step"] for e in rl] == list(range(1, cfg.run.steps + 1))
    assert all(e["batch/trajectories"] > 0 for e in rl), "a batch with no signal tests nothing"
    for e in rl:
        assert 0 < e["offpolicy/ess"] <= 1 and math.isfinite(e["actor/pg_loss"])
        assert e["actor/grad_norm"] > 0 and 0 <= e["staleness/bound"] <= 1
    if throttle:
        # the logged bound is the throttle's reading of the logged ESS, step by step
        expected = StalenessBound(cfg.async_)
        assert [e["staleness/bound"] for e in rl] == [expected.observe(e["offpolicy/ess"]) for e in rl]
        # step 2 trains on groups sampled before step 1's update: ESS < 1 lowers the bound to 0
        assert rl[1]["staleness/bound"] == 0
        # and the rollouts obeyed it: while at version 2 they ran ahead by 0 versions, not 1
        # (8 groups dispatched by step 3 instead of 6)
        state = Checkpointer(run).load(Checkpointer(run).latest())[1]
        assert state.cursor <= (2 + 0 + 1) * cfg.rollout.groups_per_step
