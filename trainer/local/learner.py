"""The policy update on a verl `DataProto` (the single-machine learner): verl's actor update.

    learner = Learner(model, LearnerConfig(lr=1e-4, loss_mode="vanilla"))
    metrics = learner.ppo_update(batch)        # batch: trajectories_to_dataproto(...) + "advantages"
    metrics = learner.sft_update(batch)        # demonstrations: NLL on the loss-mask tokens

The loss of a micro-batch (log-probs from the fused kernel, verl's policy loss, its entropy and
KL terms) is in `actor_loss.py`; how a batch is cut into mini- and micro-batches in
`minibatches.py`; the settings in `learner_config.py`. Off-policy correction (asynchronous
rollouts sample with older weights) is `learner.correction`, one of the options of
`off_policy.py` (formulas there):

- ``decoupled`` (default): the proximal log-probs ``π_prox`` are the weights at the start of
  this update, fixed before its first mini-batch; PPO clips ``π_θ/π_prox``; each token is
  weighted by the truncated importance ratio ``min(π_prox/π_behav, C)`` (verl's
  rollout-correction weights).
- ``tis``, ``seq_tis``, ``seq_mis``, ``geo_mask``: no recompute; token- or sequence-level
  truncated or masked importance sampling on a REINFORCE loss, ``-w · A · log π_θ`` (verl's
  bypass mode).
- ``m2po``: verl's bypass REINFORCE with untruncated token ratios on the tokens a
  second-moment trust region keeps (its mask fixed from ``π_prox`` before the first step).
- ``none``: PPO around the behaviour policy itself (``π_prox := π_behav``).

An update is verl's actor update: ``ppo_epochs`` passes over the batch, each cut into
mini-batches of ``ppo_mini_batch_size`` groups (whole groups, in batch order; one optimiser step
each, micro-batched by ``micro_batch_size`` rows). ``π_prox`` is taken once, before the first
mini-batch, so from the second mini-batch on ``π_θ ≠ π_prox`` and the clip engages::

    π_prox ← forward(θ_0)            (one no-grad pass over the whole batch)
    for epoch in 1..ppo_epochs:
        for mini-batch k:  loss(π_θ_k / π_prox) → step → θ_{k+1}

With a single mini-batch and one epoch ``π_θ = π_prox`` at the only step, so ``π_prox`` can be
the training forward's own log-probs, detached (``proximal="reuse"``: one forward instead of
two, exact; a model with dropout recomputes in eval mode); anywhere else ``reuse`` would not be
exact and the no-grad pass runs.

π_ref, the anchor of the KL term, is the policy as RL starts, a frozen copy (`set_reference`)
whose log-probs are computed once per batch.

Every update logs the log-ratio statistics and the effective sample size of the correction's
weights as the update first applied them (``offpolicy/ess``, `off_policy.batch_metrics`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from verl.trainer.ppo import core_algos

from .actor_loss import actor_loss, global_batch_info, token_logprobs
from .learner_config import LearnerConfig, lr_lambda, policy_loss_mode, verl_actor_config
from .minibatches import micro_batches, mini_batches
from .off_policy import batch_metrics, get_correction

__all__ = ["Learner", "LearnerConfig", "verl_actor_config"]


class Learner:
    """Holds the trained model, its optimiser and schedule; applies PPO and SFT updates."""

    def __init__(self, model: Any, config: LearnerConfig | None = None, ref_model: Any | None = None) -> None:
        """`ref_model`: the KL anchor `use_kl_loss` needs (or `set_reference` before the first
        PPO update)."""
        self.model = model
        self.config = cfg = config or LearnerConfig()
        self.ref_model: Any | None = None
        if ref_model is not None:
            self.set_reference(ref_model)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(cfg))
        self.actor_cfg = verl_actor_config(cfg)
        self.correction = get_correction(cfg.correction)
        self.loss_fn = core_algos.get_policy_loss_fn(policy_loss_mode(cfg))
        self.steps = 0
        self.last_update_metrics: list[dict[str, float]] = []

    def set_reference(self, model: Any) -> None:
        """The reference policy π_ref of the KL term, frozen (no gradients, eval mode)."""
        self.ref_model = model.eval().requires_grad_(False)

    # ---- log-probs ---------------------------------------------------------------------
    def _micro_batches(self, data: Any) -> list[tuple[torch.Tensor, dict[str, torch.Tensor]]]:
        """(row indices, tensors) per micro-batch (`minibatches.micro_batches`)."""
        return micro_batches(data, self.config.micro_batch_size, self.config.share_prefix_min)

    @torch.no_grad()
    def compute_logprobs(self, data: Any, model: Any | None = None) -> torch.Tensor:
        """Log-probs ``[B, R]`` of the batch's responses under `model` (default: the policy)."""
        model = model or self.model
        was_training = model.training
        model.eval()
        try:
            out = torch.zeros(
                data.batch["responses"].shape, dtype=torch.float32, device=data.batch["responses"].device
            )
            for idx, mb in self._micro_batches(data):
                lp = token_logprobs(model, mb, self.config)[0]
                out[idx, : lp.shape[1]] = lp.to(out.dtype)
            return out
        finally:
            model.train(was_training)

    # ---- updates -----------------------------------------------------------------------
    def mini_batches(self, data: Any) -> list[np.ndarray]:
        """Row indices of each mini-batch: ``ppo_mini_batch_size`` whole groups (``uid``) at a
        time, in the order the groups first appear (a row without ``uid`` is its own group)."""
        return mini_batches(data, self.config.ppo_mini_batch_size)

    def ppo_update(self, data: Any) -> dict[str, float]:
        """verl's actor update on `data` (needs ``advantages``): ``ppo_epochs`` passes, one
        optimiser step per mini-batch, against ``π_prox`` fixed before the first. Metrics are
        the means over the steps (``actor/pg_clipfrac``, ``actor/ppo_kl``, ...), plus
        ``actor/pg_clipfrac_max`` and ``actor/updates``; `last_update_metrics` keeps each step's."""
        cfg, batch, corr = self.config, data.batch, self.correction
        mask = batch["response_mask"].float()
        metrics: dict[str, float] = {}
        behav = batch["rollout_log_probs"].float()
        minis = self.mini_batches(data)
        n_updates = len(minis) * cfg.ppo_epochs
        # π_prox from the training forward is exact only at the first and only step.
        reuse = corr.reusable and cfg.proximal == "reuse" and n_updates == 1 and not _has_dropout(self.model)
        prox = self.compute_logprobs(data) if corr.needs_proximal and not reuse else None
        if not reuse:
            for key, value in corr.prepare(prox, behav, mask, cfg).items():
                batch[key] = value
        if cfg.use_kl_loss:
            if self.ref_model is None:
                raise ValueError(
                    "learner.use_kl_loss needs the reference policy: Learner(ref_model=...) or "
                    "learner.set_reference(model) before the first update"
                )
            batch["ref_log_prob"] = self.compute_logprobs(data, self.ref_model)
        steps: list[dict[str, float]] = []
        seen = torch.zeros_like(behav)  # each row's log-probs at its first step
        for epoch in range(cfg.ppo_epochs):
            for rows in minis:
                part = data if len(minis) == 1 else data.select_idxs(rows)
                steps.append(self._mini_batch_step(part, reuse, seen if epoch == 0 else None, rows))
        metrics.update(batch_metrics(corr, prox if prox is not None else seen, behav, mask, cfg))
        self.last_update_metrics = steps
        keys = {k for m in steps for k in m}
        metrics.update({k: sum(m.get(k, 0.0) for m in steps) / len(steps) for k in keys})
        metrics["actor/updates"] = float(len(steps))
        if any("actor/pg_clipfrac" in m for m in steps):
            metrics["actor/pg_clipfrac_max"] = max(m.get("actor/pg_clipfrac", 0.0) for m in steps)
        return metrics

    def _mini_batch_step(
        self, data: Any, reuse: bool, seen: torch.Tensor | None, rows: np.ndarray
    ) -> dict[str, float]:
        """One optimiser step of the policy loss on one mini-batch (micro-batched); the
        training forward's log-probs go into `seen` (batch rows) when given."""
        cfg = self.config
        mask = data.batch["response_mask"].float()
        self.actor_cfg.global_batch_info.clear()
        self.actor_cfg.global_batch_info.update(global_batch_info(mask))
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        for idx, mb in self._micro_batches(data):
            logp, ent = token_logprobs(self.model, mb, cfg)
            m = mb["response_mask"].float()
            if reuse:
                mb.update(
                    self.correction.prepare(logp.detach().float(), mb["rollout_log_probs"].float(), m, cfg)
                )
            if seen is not None:
                seen[torch.as_tensor(rows)[idx], : logp.shape[1]] = logp.detach().float()
            out = actor_loss(self.loss_fn, self.actor_cfg, cfg, mb, logp, ent)
            if out.kl_loss is not None:
                sums["actor/kl_loss"] = sums.get("actor/kl_loss", 0.0) + float(out.kl_loss.detach())
                sums["actor/kl_coef"] = cfg.kl_loss_coef
            out.loss.backward()
            share = float(m.sum() / max(1.0, mask.sum().item()))
            sums["actor/loss"] = sums.get("actor/loss", 0.0) + float(out.loss.detach())
            sums["actor/pg_loss"] = sums.get("actor/pg_loss", 0.0) + float(out.pg_loss.detach())
            sums["actor/entropy"] = sums.get("actor/entropy", 0.0) + float(out.entropy.detach())
            for k, v in out.pg_metrics.items():
                if isinstance(v, int | float):
                    sums[k] = sums.get(k, 0.0) + float(v) * share
        sums.update(self._step())
        return sums

    def sft_update(self, data: Any, env_weight: float = 0.0) -> dict[str, float]:
        """One optimiser step of token-mean negative log-likelihood on the loss-mask tokens.

        With `env_weight` > 0 the tokens the model did not write (tool results and the chat
        markup between turns) are predicted too, each weighing `env_weight` of a model token
        (the sum is still divided by the number of model tokens). Tool results repeat what
        the model asked for (a search result names the country the query named), so this adds
        copying practice at no extra forward cost. `sft/nll` stays the NLL of the model's own
        tokens; `sft/env_nll` is the other tokens'."""
        mask_all = data.batch["response_mask"].float()
        total = max(1.0, mask_all.sum().item())
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        nll_sum, env_sum, env_count = 0.0, 0.0, 0.0
        for _, mb in self._micro_batches(data):
            own = mb["response_mask"].bool()
            # the non-padding response tokens the model did not write (none when the weight is 0)
            env = mb["attention_mask"][:, -own.shape[1] :].bool() & ~own & (env_weight > 0)
            logp, _ = token_logprobs(self.model, mb, self.config, own | env)
            nll = -(logp * own).sum() / total
            env_nll = -(logp * env).sum()
            (nll + env_weight * env_nll / total).backward()
            nll_sum += float(nll.detach())
            env_sum, env_count = env_sum + float(env_nll.detach()), env_count + float(env.sum())
        env_metrics = {"sft/env_nll": env_sum / max(1.0, env_count)} if env_weight > 0 else {}
        return {"sft/nll": nll_sum, **env_metrics, **self._step()}

    def _step(self) -> dict[str, float]:
        params = [p for p in self.model.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip)
        if not torch.isfinite(norm):
            self.optimizer.zero_grad(set_to_none=True)  # skip a step that would poison the weights
            return {"actor/grad_norm": float(norm), "actor/skipped_step": 1.0}
        self.optimizer.step()
        self.scheduler.step()
        self.steps += 1
        return {"actor/grad_norm": float(norm), "actor/lr": self.scheduler.get_last_lr()[0]}

    def state_dict(self) -> dict[str, Any]:
        """Optimiser, schedule and step count (the model's weights are saved separately)."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "steps": self.steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.steps = int(state["steps"])


def _has_dropout(model: Any) -> bool:
    """Whether training mode changes the model's outputs (a dropout probability above 0)."""
    config = getattr(model, "config", None)
    rates = [v for k, v in (config.to_dict() if config is not None else {}).items() if k.endswith("dropout")]
    modules = [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    return any(isinstance(r, float | int) and r > 0 for r in rates + modules)
