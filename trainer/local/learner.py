"""The policy update on a verl `DataProto` (the single-machine learner): verl's actor update.

    learner = Learner(model, LearnerConfig(lr=1e-4, loss_mode="vanilla"))
    metrics = learner.ppo_update(batch)        # batch: trajectories_to_dataproto(...) + "advantages"
    metrics = learner.sft_update(batch)        # demonstrations: NLL on the loss-mask tokens

Per-token log-probs and entropies come from the fused kernel (`arborl.kernels`): hidden
states of the response positions go through the LM head chunk by chunk, so the
``[tokens, vocab]`` logits are never materialised. Only tokens under the response mask are
sent through the head::

    input_ids   | pad p p p | r r r o o o r r | pad |
    hidden      |   h h h h   h h h h h h h     |      position t predicts token t+1
    scored      |         ^ ^ ^       ^ ^ ^     |      (mask 1 → gathered → kernel → scattered back)

The policy loss is verl's, looked up by name in its registry (`get_policy_loss_fn`:
vanilla, gspo, cispo, ...), aggregated by verl's `agg_loss` with global token / sequence
counts so that micro-batching does not change the loss. Off-policy correction (asynchronous
rollouts sample with older weights):

- ``decoupled`` (default): the proximal log-probs ``π_prox`` are the weights at the start of
  this update, fixed before its first mini-batch; PPO clips ``π_θ/π_prox``; each token is
  weighted by the truncated importance ratio ``min(π_prox/π_behav, C)`` (verl's
  rollout-correction weights).
- ``tis``: no recompute; truncated importance sampling on a REINFORCE loss,
  ``-min(π_θ/π_behav, C) · A · log π_θ`` (verl's bypass mode).
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

The loss of a mini-batch is verl's actor loss (`verl.workers.utils.losses.ppo_loss`), each
term aggregated by `agg_loss`::

    loss = pg_loss − entropy_coeff · H(π_θ) + kl_loss_coef · KL(π_θ ‖ π_ref)      (KL: use_kl_loss)

with the KL per token from verl's `kl_penalty` (``low_var_kl``: ``e^(ref−logp) − (ref−logp) − 1``,
clamped to [−10, 10]); π_ref is the policy as RL starts, a frozen copy (`set_reference`) whose
log-probs are computed once per batch.

Every update logs the log-ratio statistics and the effective sample size.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

from arborl.kernels import fused_logprob_entropy

from .prefix import prefix_groups, response_hidden_states


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
    correction: Literal["decoupled", "tis", "none"] = Field("decoupled", description="off-policy correction")
    is_threshold: float = Field(2.0, gt=0, description="truncation C of importance weights")
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


def _lr_lambda(cfg: LearnerConfig) -> Any:
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


def verl_actor_config(cfg: LearnerConfig) -> Any:
    """The verl `ActorConfig` its policy-loss functions read."""
    from verl.trainer.config import RolloutCorrectionConfig
    from verl.workers.config import ActorConfig
    from verl.workers.config.actor import PolicyLossConfig

    policy_loss = PolicyLossConfig(loss_mode=cfg.loss_mode)
    if cfg.correction == "tis":
        correction = RolloutCorrectionConfig(
            rollout_is="token", rollout_is_threshold=cfg.is_threshold, loss_type="reinforce", bypass_mode=True
        )
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
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, _lr_lambda(cfg))
        self.actor_cfg = verl_actor_config(cfg)
        self.loss_fn = core_algos.get_policy_loss_fn(
            "bypass_mode" if cfg.correction == "tis" else cfg.loss_mode
        )
        self.steps = 0
        self.last_update_metrics: list[dict[str, float]] = []

    def set_reference(self, model: Any) -> None:
        """The reference policy π_ref of the KL term, frozen (no gradients, eval mode)."""
        self.ref_model = model.eval().requires_grad_(False)

    # ---- log-probs ---------------------------------------------------------------------
    def _forward(
        self, model: Any, mb: dict[str, torch.Tensor], mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs and entropies ``[b, R]`` of the response tokens where `mask` (default: the
        loss mask) is set, 0 elsewhere."""
        # Position t predicts token t+1; a prompt prefix the rows share is computed once.
        min_shared = self.config.share_prefix_min if self.config.share_prefix_min > 0 else 1 << 30
        hidden = response_hidden_states(model, mb, min_shared=min_shared)
        mask = mb["response_mask"].bool() if mask is None else mask
        head = model.get_output_embeddings()
        lp, ent = fused_logprob_entropy(
            hidden[mask],
            head.weight,
            mb["responses"][mask],
            temperature=self.config.temperature,
            bias=getattr(head, "bias", None),
            backend=self.config.kernel_backend,
        )
        logp = torch.zeros(mask.shape, dtype=lp.dtype, device=mask.device).masked_scatter(mask, lp)
        entropy = torch.zeros(mask.shape, dtype=ent.dtype, device=mask.device).masked_scatter(mask, ent)
        return logp, entropy

    def _micro_batches(self, data: Any) -> list[tuple[torch.Tensor, dict[str, torch.Tensor]]]:
        """(row indices, tensors) per micro-batch: rows grouped by the prompt prefix they share,
        sorted by length within a group, and each micro-batch cut to its own extent (prompts
        are left-padded, responses right-padded to the batch's longest), so padding costs no
        compute. Exact: padded positions are masked anyway.

            batch   | p p p p r r r . . . |        micro-batch of the shorter rows
                    | . . p p r r . . . . |   →    | p p r r . |
                    | . p p p r r r r r r |        | p p p r r |

        A micro-batch never mixes rows whose prompts share fewer than `share_prefix_min`
        tokens: one row of another suite (another system prompt) would leave the whole
        micro-batch without a shared prefix to compute once (`prefix.py`).
        """
        b = data.batch
        seq_keys = ("input_ids", "attention_mask", "position_ids")
        resp_keys = ["responses", "response_mask"]
        extra = ("advantages", "old_log_probs", "rollout_log_probs", "ref_log_prob", "is_weights")
        resp_keys += [k for k in extra if k in b.keys()]  # noqa: SIM118 - a TensorDict
        resp_len = b["responses"].shape[1]
        prompt_len = b["input_ids"].shape[1] - resp_len
        att = b["attention_mask"]
        lengths = att.sum(-1)
        out = []
        for group in prefix_groups(
            b["input_ids"][:, :prompt_len], att[:, :prompt_len], self.config.share_prefix_min
        ):
            order = group[torch.argsort(lengths[group], descending=True, stable=True)]
            for i in range(0, len(order), self.config.micro_batch_size):
                idx = order[i : i + self.config.micro_batch_size]
                a = att[idx]
                start = int(prompt_len - a[:, :prompt_len].sum(-1).max())  # first prompt column in use
                used = max(1, int(a[:, prompt_len:].sum(-1).max()))  # response columns in use
                mb = {k: b[k][idx][:, start : prompt_len + used] for k in seq_keys}
                mb.update({k: b[k][idx][:, :used] for k in resp_keys})
                out.append((idx, mb))
        return out

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
                lp = self._forward(model, mb)[0]
                out[idx, : lp.shape[1]] = lp.to(out.dtype)
            return out
        finally:
            model.train(was_training)

    # ---- updates -----------------------------------------------------------------------
    def _global_info(self, mask: torch.Tensor) -> dict[str, Any]:
        return {
            "dp_size": 1,
            "batch_num_tokens": int(mask.sum().item()),
            "global_batch_size": int((mask.sum(-1) > 0).sum().item()),
            # seq-mean-token-sum-norm divides by the horizon: the batch's, not a micro-batch's.
            "loss_scale_factor": mask.shape[-1],
        }

    def mini_batches(self, data: Any) -> list[np.ndarray]:
        """Row indices of each mini-batch: ``ppo_mini_batch_size`` whole groups (``uid``) at a
        time, in the order the groups first appear (a row without ``uid`` is its own group)."""
        n, size = len(data), self.config.ppo_mini_batch_size
        if size is None:
            return [np.arange(n)]
        uid = data.non_tensor_batch.get("uid")
        keys = [str(u) for u in uid] if uid is not None else [str(i) for i in range(n)]
        rows: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            rows.setdefault(key, []).append(i)
        groups = list(rows.values())
        return [np.concatenate(groups[k : k + size]).astype(np.int64) for k in range(0, len(groups), size)]

    def ppo_update(self, data: Any) -> dict[str, float]:
        """verl's actor update on `data` (needs ``advantages``): ``ppo_epochs`` passes, one
        optimiser step per mini-batch, against ``π_prox`` fixed before the first. Metrics are
        the means over the steps (``actor/pg_clipfrac``, ``actor/ppo_kl``, ...), plus
        ``actor/pg_clipfrac_max`` and ``actor/updates``; `last_update_metrics` keeps each step's."""
        cfg, batch = self.config, data.batch
        mask = batch["response_mask"].float()
        metrics: dict[str, float] = {}
        behav = batch["rollout_log_probs"].float()
        minis = self.mini_batches(data)
        n_updates = len(minis) * cfg.ppo_epochs
        # π_prox from the training forward is exact only at the first and only step.
        reuse = (
            cfg.correction == "decoupled"
            and cfg.proximal == "reuse"
            and n_updates == 1
            and not _has_dropout(self.model)
        )
        if cfg.correction == "decoupled" and not reuse:
            prox = self.compute_logprobs(data)
            batch["old_log_probs"], batch["is_weights"] = prox, self._is_weights(prox, behav, mask, metrics)
        elif not reuse:
            batch["old_log_probs"] = behav
        if cfg.use_kl_loss:
            if self.ref_model is None:
                raise ValueError(
                    "learner.use_kl_loss needs the reference policy: Learner(ref_model=...) or "
                    "learner.set_reference(model) before the first update"
                )
            batch["ref_log_prob"] = self.compute_logprobs(data, self.ref_model)
        steps: list[dict[str, float]] = []
        prox_all = torch.zeros_like(behav)
        for _ in range(cfg.ppo_epochs):
            for rows in minis:
                part = data if len(minis) == 1 else data.select_idxs(rows)
                steps.append(self._mini_batch_step(part, reuse, prox_all, rows))
        if reuse:  # the statistics over the whole batch, as the recompute path logs them
            self._is_weights(prox_all, behav, mask, metrics)
        self.last_update_metrics = steps
        keys = {k for m in steps for k in m}
        metrics.update({k: sum(m.get(k, 0.0) for m in steps) / len(steps) for k in keys})
        metrics["actor/updates"] = float(len(steps))
        if any("actor/pg_clipfrac" in m for m in steps):
            metrics["actor/pg_clipfrac_max"] = max(m.get("actor/pg_clipfrac", 0.0) for m in steps)
        return metrics

    def _mini_batch_step(
        self, data: Any, reuse: bool, prox_all: torch.Tensor, rows: np.ndarray
    ) -> dict[str, float]:
        """One optimiser step of the policy loss on one mini-batch (micro-batched)."""
        cfg = self.config
        mask = data.batch["response_mask"].float()
        self.actor_cfg.global_batch_info.clear()
        self.actor_cfg.global_batch_info.update(self._global_info(mask))
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        for idx, mb in self._micro_batches(data):
            logp, ent = self._forward(self.model, mb)
            m = mb["response_mask"].float()
            if reuse:
                prox = logp.detach().float()
                mb["old_log_probs"], mb["is_weights"] = (
                    prox,
                    self._is_weights(prox, mb["rollout_log_probs"].float(), m),
                )
                prox_all[torch.as_tensor(rows)[idx], : prox.shape[1]] = prox
            pg_loss, pg_metrics = self.loss_fn(
                mb["old_log_probs"],
                logp,
                mb["advantages"],
                m,
                cfg.loss_agg_mode,
                self.actor_cfg,
                rollout_is_weights=mb.get("is_weights"),
            )
            # verl's composition (verl.workers.utils.losses.ppo_loss):
            #   loss = pg_loss - entropy_coeff · entropy + kl_loss_coef · kl
            # each term aggregated by agg_loss over the mini-batch's tokens / sequences
            loss = pg_loss
            info = self.actor_cfg.global_batch_info
            ent_loss = core_algos.agg_loss(ent, m, cfg.loss_agg_mode, **info)
            if cfg.entropy_coeff:
                loss = loss - cfg.entropy_coeff * ent_loss
            if cfg.use_kl_loss:
                kl = core_algos.kl_penalty(logp, mb["ref_log_prob"], cfg.kl_loss_type)
                kl_loss = core_algos.agg_loss(kl, m, cfg.loss_agg_mode, **info)
                loss = loss + cfg.kl_loss_coef * kl_loss
                sums["actor/kl_loss"] = sums.get("actor/kl_loss", 0.0) + float(kl_loss.detach())
                sums["actor/kl_coef"] = cfg.kl_loss_coef
            loss.backward()
            share = float(m.sum() / max(1.0, mask.sum().item()))
            sums["actor/loss"] = sums.get("actor/loss", 0.0) + float(loss.detach())
            sums["actor/pg_loss"] = sums.get("actor/pg_loss", 0.0) + float(pg_loss.detach())
            sums["actor/entropy"] = sums.get("actor/entropy", 0.0) + float(ent_loss.detach())
            for k, v in pg_metrics.items():
                if isinstance(v, int | float):
                    sums[k] = sums.get(k, 0.0) + float(v) * share
        sums.update(self._step())
        return sums

    def _is_weights(
        self,
        prox: torch.Tensor,
        behav: torch.Tensor,
        mask: torch.Tensor,
        metrics: dict[str, float] | None = None,
    ) -> torch.Tensor:
        """Truncated per-token importance weights ``min(π_prox/π_behav, C)`` (verl's); their
        statistics go into `metrics` when given."""
        weights, is_metrics = compute_rollout_correction_weights(
            (prox - behav) * mask, mask, rollout_is="token", rollout_is_threshold=self.config.is_threshold
        )
        if metrics is not None:
            metrics.update({f"offpolicy/{k}": float(v) for k, v in is_metrics.items()})
            metrics["offpolicy/log_ratio_abs_mean"] = _masked_mean((prox - behav).abs(), mask)
        return weights

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
            logp, _ = self._forward(self.model, mb, own | env)
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


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum() / mask.sum().clamp(min=1))
