"""The learner on the real tiny model: fused log-probs equal the model's own, updates move
the policy the way the advantages say, micro-batching does not change the gradient."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from arborl.agents import Trajectory, Turn
from arborl.trainer.dataproto import trajectories_to_dataproto
from arborl.trainer.local.learner import Learner, LearnerConfig

T = 0.7


@pytest.fixture(scope="module")
def base_model(tiny_model):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)


@pytest.fixture
def model(base_model):
    return copy.deepcopy(base_model)


def batch(model, n: int = 6, seed: int = 0):
    """Multi-turn trajectories of random ids with behaviour log-probs a little off the policy."""
    rng = np.random.default_rng(seed)
    vocab = model.config.vocab_size
    trajs = []
    for i in range(n):
        turns = []
        for k in range(2):
            ids = rng.integers(0, vocab, rng.integers(2, 7)).tolist()
            obs = rng.integers(0, vocab, 3).tolist() if k == 0 else []
            turns.append(Turn(ids, [0.0] * len(ids), observation_ids=obs))
        prompt = rng.integers(0, vocab, rng.integers(3, 9)).tolist()
        trajs.append(Trajectory(prompt, turns, group_id=str(i // 2)))
    data = trajectories_to_dataproto(trajs, pad_token_id=0)
    learner = Learner(model, LearnerConfig(temperature=T))
    exact = learner.compute_logprobs(data)
    noise = torch.randn(exact.shape, generator=torch.Generator().manual_seed(seed))
    data.batch["rollout_log_probs"] = exact + 0.05 * noise * data.batch["response_mask"]
    return data


def all_logprobs(model, data, temperature: float = T) -> torch.Tensor:
    """Log-probs ``[b, R]`` of every response token, loss mask or not, from the model's full
    logits (materialised)."""
    with torch.no_grad():
        logits = model(
            input_ids=data.batch["input_ids"],
            attention_mask=data.batch["attention_mask"],
            position_ids=data.batch["position_ids"],
        ).logits
    r = data.batch["responses"].shape[1]
    lp = torch.log_softmax(logits[:, -r - 1 : -1].float() / temperature, -1)
    return lp.gather(-1, data.batch["responses"].unsqueeze(-1)).squeeze(-1)


def reference_logprobs(model, data) -> torch.Tensor:
    """The model's log-probs at temperature T on the loss mask, 0 elsewhere (materialised)."""
    return all_logprobs(model, data) * data.batch["response_mask"]


def test_fused_logprobs_equal_the_models_own(model):
    data = batch(model)
    ours = Learner(model, LearnerConfig(temperature=T, micro_batch_size=4)).compute_logprobs(data)
    torch.testing.assert_close(ours, reference_logprobs(model, data), rtol=0, atol=2e-5)


@pytest.mark.parametrize("correction", ["decoupled", "tis", "none", "seq_tis", "seq_mis", "geo_mask", "m2po"])
def test_updates_follow_the_advantages(model, correction):
    data = batch(model)
    mask = data.batch["response_mask"]
    sign = torch.tensor([1.0, -1.0] * 3).unsqueeze(1)
    data.batch["advantages"] = sign * mask
    learner = Learner(model, LearnerConfig(lr=3e-3, temperature=T, correction=correction, micro_batch_size=4))
    before = learner.compute_logprobs(data)
    metrics = learner.ppo_update(data)
    after = learner.compute_logprobs(data)
    seq = ((after - before) * mask).sum(-1)
    assert (seq[0::2] > 0).all() and (seq[1::2] < 0).all(), seq  # up where A > 0, down where A < 0
    assert np.isfinite(metrics["actor/pg_loss"]) and metrics["actor/grad_norm"] > 0
    assert 0.9 < metrics["offpolicy/ess"] <= 1  # 5 % off the policy: nearly every sample counts
    if correction == "decoupled":
        assert 0 < metrics["offpolicy/rollout_is_eff_sample_size"] <= 1
        assert metrics["offpolicy/log_ratio_abs_mean"] == pytest.approx(0.04, rel=0.3)  # |N(0, .05)|


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum-norm"])
def test_micro_batching_does_not_change_the_gradient(base_model, agg):
    """Micro-batches are sorted by length and cut to their own extent: the gradient is the
    full batch's all the same (also for a mode that normalises by the response horizon)."""
    grads = []
    for size in (1, 6):
        model = copy.deepcopy(base_model)
        data = batch(model)
        data.batch["advantages"] = torch.linspace(-1, 1, 6).unsqueeze(1) * data.batch["response_mask"]
        cfg = LearnerConfig(lr=1e-3, temperature=T, micro_batch_size=size, grad_clip=1e9, loss_agg_mode=agg)
        learner = Learner(model, cfg)
        learner.optimizer.step = lambda: None  # keep the gradients to compare them
        learner.ppo_update(data)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-7)


def _update_counting_forwards(base_model, **cfg):
    """Gradient, metrics and number of model forwards of one PPO update (optimiser step
    held back so the gradient stays to compare)."""
    model = copy.deepcopy(base_model)
    data = batch(model)
    data.batch["advantages"] = torch.linspace(-1, 1, 6).unsqueeze(1) * data.batch["response_mask"]
    learner = Learner(model, LearnerConfig(lr=1e-3, temperature=T, micro_batch_size=4, grad_clip=1e9, **cfg))
    learner.optimizer.step = lambda: None
    calls = []
    hook = model.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        metrics = learner.ppo_update(data)
    finally:
        hook.remove()
    grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return grad, metrics, len(calls)


def test_decoupled_reuses_the_training_forward_for_the_proximal_policy(base_model):
    """One optimiser step per update: π_prox is the policy being trained, so its log-probs
    come from the training forward (detached): the same gradient and off-policy statistics
    as a second forward gives, with half the forwards."""
    g_reuse, m_reuse, n_reuse = _update_counting_forwards(base_model, proximal="reuse")
    g_again, m_again, n_again = _update_counting_forwards(base_model, proximal="recompute")
    assert (n_reuse, n_again) == (2, 4)  # 6 rows in micro-batches of 4
    torch.testing.assert_close(g_reuse, g_again, rtol=1e-4, atol=1e-7)
    for key in ("offpolicy/log_ratio_abs_mean", "offpolicy/rollout_is_eff_sample_size", "actor/pg_loss"):
        assert m_reuse[key] == pytest.approx(m_again[key], rel=1e-4), key
    assert m_reuse["offpolicy/log_ratio_abs_mean"] == pytest.approx(0.04, rel=0.3)


def test_a_model_with_dropout_recomputes_the_proximal_policy_in_eval_mode(base_model):
    dropped = copy.deepcopy(base_model)
    dropped.config.attention_dropout = 0.1
    for layer in dropped.model.layers:
        layer.self_attn.attention_dropout = 0.1
    _, metrics, forwards = _update_counting_forwards(dropped, proximal="reuse")
    assert forwards == 4 and np.isfinite(metrics["actor/pg_loss"])


def test_sft_lowers_the_nll_of_demonstrations(model):
    data = batch(model)
    learner = Learner(model, LearnerConfig(lr=3e-3, temperature=1.0))
    first = learner.sft_update(data)["sft/nll"]
    for _ in range(10):
        last = learner.sft_update(data)["sft/nll"]
    assert last < first * 0.8


def test_sft_env_weight_also_trains_on_the_tokens_the_model_did_not_write(model):
    data = batch(model)
    r = data.batch["responses"].shape[1]
    own = data.batch["response_mask"].bool()
    env = data.batch["attention_mask"][:, -r:].bool() & ~own  # observations between turns
    assert env.any() and own.any()
    lp = all_logprobs(model, data, temperature=1.0)
    plain = Learner(copy.deepcopy(model), LearnerConfig(lr=3e-3, temperature=1.0))
    assert "sft/env_nll" not in plain.sft_update(data, env_weight=0.0)
    learner = Learner(model, LearnerConfig(lr=3e-3, temperature=1.0, micro_batch_size=4))
    first = learner.sft_update(data, env_weight=1.0)
    assert first["sft/nll"] == pytest.approx(float(-lp[own].mean()), rel=1e-4)
    assert first["sft/env_nll"] == pytest.approx(float(-lp[env].mean()), rel=1e-4)
    for _ in range(10):
        last = learner.sft_update(data, env_weight=1.0)
    assert last["sft/env_nll"] < 0.8 * first["sft/env_nll"] and last["sft/nll"] < first["sft/nll"]


def test_kl_to_the_reference_starts_at_zero_and_grows(base_model):
    model, ref = copy.deepcopy(base_model), copy.deepcopy(base_model)
    data = batch(model)
    data.batch["advantages"] = data.batch["response_mask"].float()
    cfg = LearnerConfig(lr=3e-3, temperature=T, use_kl_loss=True, kl_loss_coef=0.1)
    learner = Learner(model, cfg, ref_model=ref)
    first = learner.ppo_update(data)
    assert first["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6) and first["actor/kl_coef"] == 0.1
    for _ in range(3):
        kl = learner.ppo_update(data)["actor/kl_loss"]
    assert kl > 1e-5
    with pytest.raises(ValueError, match="reference policy"):
        Learner(model, cfg).ppo_update(data)


def _entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits, -1)
    return -(logp.exp() * logp).sum(-1)


def _plain_loss(model, ref, data, cfg: LearnerConfig) -> torch.Tensor:
    """verl's actor loss, one token at a time: vanilla PPO (clip, dual clip) around the
    behaviour policy, minus entropy_coeff x the token's entropy, plus kl_loss_coef x low_var_kl
    to `ref` (``e^(ref - logp) - (ref - logp) - 1``, clamped to [-10, 10]); token-mean."""
    b = data.batch
    r = b["responses"].shape[1]
    fwd = dict(input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"])
    logits = model(**fwd).logits[:, -r - 1 : -1].float() / T
    with torch.no_grad():
        ref_logits = ref(**fwd).logits[:, -r - 1 : -1].float() / T
    terms = []
    for i in range(len(data)):
        for t in range(r):
            if not b["response_mask"][i, t]:
                continue
            token = b["responses"][i, t]
            logp = torch.log_softmax(logits[i, t], -1)[token]
            ref_logp = float(torch.log_softmax(ref_logits[i, t], -1)[token])
            a, old = float(b["advantages"][i, t]), float(b["rollout_log_probs"][i, t])
            ratio = torch.exp(logp - old)
            clipped = torch.maximum(
                -a * ratio, -a * ratio.clamp(1 - cfg.clip_ratio_low, 1 + cfg.clip_ratio_high)
            )
            pg = torch.minimum(clipped, torch.tensor(-a * cfg.clip_ratio_c)) if a < 0 else clipped
            d = ref_logp - logp
            kl = (torch.exp(d) - d - 1).clamp(-10, 10)
            terms.append(pg - cfg.entropy_coeff * _entropy(logits[i, t]) + cfg.kl_loss_coef * kl)
    return torch.stack(terms).mean()


def test_the_loss_is_verls_pg_minus_entropy_plus_kl_computed_in_a_plain_loop(base_model):
    """Loss and gradient of one update equal verl's formula written out token by token, with
    the policy away from its reference (so the KL is not 0) and from the behaviour policy
    (so the clip engages), over several micro-batches."""
    model, ref = copy.deepcopy(base_model), copy.deepcopy(base_model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    data = batch(model)
    mask = data.batch["response_mask"]
    data.batch["advantages"] = torch.linspace(-1.5, 1.5, 6).unsqueeze(1) * mask
    cfg = LearnerConfig(
        lr=1e-3,
        temperature=T,
        correction="none",  # π_prox := π_behav, 5 % off the policy: some ratios are clipped
        clip_ratio_low=0.02,
        clip_ratio_high=0.02,
        micro_batch_size=4,
        grad_clip=1e9,
        entropy_coeff=0.03,
        use_kl_loss=True,
        kl_loss_coef=0.5,
        kl_loss_type="low_var_kl",
    )
    learner = Learner(model, cfg, ref_model=ref)
    learner.optimizer.step = lambda: None  # keep the gradient to compare it
    metrics = learner.ppo_update(data)
    assert 0 < metrics["actor/pg_clipfrac"] < 1 and metrics["actor/kl_loss"] > 1e-3
    got = torch.cat([p.grad.flatten() for p in model.parameters()])

    plain_model = copy.deepcopy(base_model)
    loss = _plain_loss(plain_model, ref, data, cfg)
    assert metrics["actor/loss"] == pytest.approx(float(loss), rel=1e-4, abs=1e-6)
    assert metrics["actor/loss"] == pytest.approx(
        metrics["actor/pg_loss"] - 0.03 * metrics["actor/entropy"] + 0.5 * metrics["actor/kl_loss"], rel=1e-5
    )
    want = torch.autograd.grad(loss, list(plain_model.parameters()))
    torch.testing.assert_close(got, torch.cat([g.flatten() for g in want]), rtol=1e-3, atol=1e-6)


def test_the_entropy_term_changes_the_gradient(base_model):
    """With zero advantages the policy loss gives no gradient; the entropy bonus alone does,
    and a step along it raises the entropy."""
    data = batch(base_model)
    data.batch["advantages"] = torch.zeros_like(data.batch["response_mask"], dtype=torch.float32)
    runs = {}
    for coeff in (0.0, 0.5):
        model = copy.deepcopy(base_model)
        learner = Learner(model, LearnerConfig(lr=1e-2, temperature=T, entropy_coeff=coeff))
        first = learner.ppo_update(data)
        runs[coeff] = (first, learner.ppo_update(data))
    assert runs[0.0][0]["actor/grad_norm"] == 0.0
    assert runs[0.5][0]["actor/grad_norm"] > 1e-3
    assert runs[0.5][1]["actor/entropy"] > runs[0.5][0]["actor/entropy"]


def test_the_reference_keeps_the_initial_weights_through_updates(base_model):
    """π_ref is a frozen copy: after several updates its log-probs are still the initial
    policy's, while the policy's have moved."""
    model = copy.deepcopy(base_model)
    data = batch(model)
    data.batch["advantages"] = torch.tensor([1.0, -1.0] * 3).unsqueeze(1) * data.batch["response_mask"]
    cfg = LearnerConfig(lr=3e-3, temperature=T, use_kl_loss=True, kl_loss_coef=0.01)
    learner = Learner(model, cfg, ref_model=copy.deepcopy(model))
    initial = learner.compute_logprobs(data)
    for _ in range(4):
        learner.ppo_update(data)
    assert not any(p.requires_grad for p in learner.ref_model.parameters())
    assert torch.equal(learner.compute_logprobs(data, learner.ref_model), initial)
    assert (learner.compute_logprobs(data) - initial).abs().max() > 1e-3


def test_kl_and_entropy_settings_are_verls_names():
    with pytest.raises(ValueError, match="kl_coef → kl_loss_coef"):
        LearnerConfig(kl_coef=0.1)
    with pytest.raises(ValueError, match="not one of verl's kl_penalty estimators"):
        LearnerConfig(kl_loss_type="k4")
    assert LearnerConfig(kl_loss_type="low_var_kl+").kl_loss_type == "low_var_kl+"


@pytest.mark.parametrize("loss_mode", ["gspo", "cispo", "clip_cov"])
def test_other_verl_policy_losses_run_from_the_registry(model, loss_mode):
    data = batch(model)
    data.batch["advantages"] = torch.tensor([1.0, -1.0] * 3).unsqueeze(1) * data.batch["response_mask"]
    learner = Learner(
        model, LearnerConfig(lr=1e-3, temperature=T, loss_mode=loss_mode, loss_agg_mode="seq-mean-token-mean")
    )
    before = [p.detach().clone() for p in model.parameters()]
    metrics = learner.ppo_update(data)
    assert np.isfinite(metrics["actor/pg_loss"])
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def _verl_actor(cfg: LearnerConfig):
    """verl's own actor config with the clip settings of `cfg` (built here, not by the learner)."""
    from verl.workers.config import ActorConfig

    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=cfg.micro_batch_size,
        clip_ratio=cfg.clip_ratio_low,
        clip_ratio_low=cfg.clip_ratio_low,
        clip_ratio_high=cfg.clip_ratio_high,
        clip_ratio_c=cfg.clip_ratio_c,
        loss_agg_mode=cfg.loss_agg_mode,
    )


@pytest.mark.parametrize("epochs", [1, 2])
def test_mini_batches_clip_against_a_proximal_policy_fixed_before_the_first(base_model, epochs):
    """3 groups, one group a mini-batch: π_prox is the policy before the update, so from the
    second step on π_θ/π_prox moves and the clip engages; each step's loss is verl's
    `compute_policy_loss_vanilla` on log-probs computed here from the model's own logits."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

    model = copy.deepcopy(base_model)
    data = batch(model)  # 6 rows in groups "0", "1", "2"
    mask = data.batch["response_mask"]
    data.batch["advantages"] = torch.tensor([1.0, -1.0] * 3).unsqueeze(1) * mask
    cfg = LearnerConfig(
        lr=2e-2, temperature=T, micro_batch_size=4, ppo_mini_batch_size=1, ppo_epochs=epochs, grad_clip=1e9
    )
    learner = Learner(model, cfg)
    minis = learner.mini_batches(data)
    assert [m.tolist() for m in minis] == [[0, 1], [2, 3], [4, 5]]  # whole groups, in order
    prox = reference_logprobs(model, data)  # π_prox: the policy before the update
    behav = data.batch["rollout_log_probs"]
    expected: list[float] = []
    original = learner._mini_batch_step

    def checked(part, *args):
        rows = torch.as_tensor(args[-1])
        logp = reference_logprobs(model, part)  # the weights this step trains from
        weights = (
            torch.clamp(torch.exp(prox[rows] - behav[rows]), max=cfg.is_threshold)
            * part.batch["response_mask"]
        )
        loss, _ = compute_policy_loss_vanilla(
            prox[rows],
            logp,
            part.batch["advantages"],
            part.batch["response_mask"],
            "token-mean",
            _verl_actor(cfg),
            rollout_is_weights=weights,
        )
        expected.append(float(loss))
        return original(part, *args)

    learner._mini_batch_step = checked
    metrics = learner.ppo_update(data)
    steps = learner.last_update_metrics
    assert len(steps) == 3 * epochs and metrics["actor/updates"] == 3 * epochs
    assert [s["actor/pg_loss"] for s in steps] == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert steps[0]["actor/pg_clipfrac"] == 0.0  # θ = π_prox at the first step: nothing to clip
    assert all(s["actor/pg_clipfrac"] > 0 for s in steps[1:]), [s["actor/pg_clipfrac"] for s in steps]
    assert (
        metrics["actor/pg_clipfrac"] > 0 and metrics["actor/pg_clipfrac_max"] >= metrics["actor/pg_clipfrac"]
    )


def test_proximal_reuse_is_used_only_where_it_is_exact(base_model):
    """One mini-batch and one epoch: π_prox from the training forward (one forward per
    micro-batch); two mini-batches: a no-grad pass over the batch first."""
    _, _, one = _update_counting_forwards(base_model, proximal="reuse")
    _, m, two = _update_counting_forwards(base_model, proximal="reuse", ppo_mini_batch_size=2)
    assert one == 2  # 6 rows in micro-batches of 4
    assert two == 2 + 2 and m["actor/updates"] == 2.0  # prox (2 micro-batches) + groups {0,1} and {2}
