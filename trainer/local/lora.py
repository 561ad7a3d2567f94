"""LoRA training through peft: the learner trains an adapter, the engine receives the adapter.

With ``model.lora.r > 0`` the learner's model gets peft's LoRA layers (`attach_lora`:
``get_peft_model``, every base weight frozen), so the optimiser sees the adapter's ``A``/``B``
matrices alone. The learner keeps working on the HF model itself (peft injects its layers
in place; ``PeftModel.model`` would be the whole causal LM, not its decoder), and the run keeps
the `PeftModel` for what is peft's: the adapter's tensors and ``save_pretrained``::

    PeftModel ── base_model (LoraModel) ── model: Qwen2ForCausalLM   ← the learner's `model`
                                                   └ q_proj: lora.Linear(base_layer, lora_A, lora_B)

After each update the engine is sent `adapter_of(peft)` (peft's saved naming and config,
`arborl.agents.engines.adapters.LoraAdapter`), never the base weights (`push_policy`), and a
checkpoint's ``model/`` holds the adapter in peft's format plus the tokenizer: what
``arborl eval model.path=<run>`` loads over the base model it names.

Targets are module names (``q_proj``: every module whose name ends with it) or ``all-linear``
(peft: every linear layer but the output head). The output head itself cannot be adapted: the
learner's fused log-prob kernel reads ``lm_head.weight`` directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from arborl.agents.engines import InferenceEngine
from arborl.agents.engines.adapters import AdapterMismatch, LoraAdapter, apply_adapter, lora_parameters

ALL_LINEAR = "all-linear"


class LoraTargetError(ValueError):
    """A `model.lora.targets` entry that matches no adaptable module of the model."""


class LoraSettings(BaseModel):
    """LoRA adapters instead of full weights (peft's ``LoraConfig``); ``r = 0``: off."""

    model_config = ConfigDict(extra="forbid")

    r: int = Field(0, ge=0, description="LoRA rank; 0: off, the full weights are trained and pushed")
    alpha: float = Field(
        16.0, gt=0, description="LoRA alpha: the adapter's update is scaled by alpha / r (peft's lora_alpha)"
    )
    targets: list[str] = Field(
        default_factory=lambda: [ALL_LINEAR],
        description="modules to adapt: names (q_proj: each module whose name ends with it) or "
        "all-linear (every linear layer but the output head); a name that matches none is an error "
        "listing the model's linear modules",
    )
    dropout: float = Field(
        0.0, ge=0, lt=1, description="dropout on the adapter's input in training (peft's lora_dropout)"
    )

    @property
    def enabled(self) -> bool:
        return self.r > 0


def frozen_tower_modules(model: Any, freeze_vision: bool) -> list[str]:
    """The names of a vision-language model's tower modules when `freeze_vision` (LoRA leaves
    them out: an adapter there would train the tower that model.freeze_vision freezes, which
    all-linear did before); [] for a text model or a trained tower."""
    from arborl.agents.vision import has_vision, vision_tower

    tower = vision_tower(model) if freeze_vision and has_vision(model) else None
    if tower is None:
        return []
    inside = {id(m) for m in tower.modules()}
    return [n for n, m in model.named_modules() if id(m) in inside and n]


def linear_module_names(model: Any) -> list[str]:
    """The distinct last name parts of `model`'s linear layers (``q_proj``, ``down_proj``, ...)."""
    return sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})


def check_targets(model: Any, targets: list[str], exclude: Sequence[str] = ()) -> None:
    """Each target names at least one linear layer of `model` outside `exclude` (module names),
    and none the output head."""
    head = model.get_output_embeddings()
    left_out = set(exclude)
    linear = ", ".join(linear_module_names(model))
    for target in targets:
        if target == ALL_LINEAR:
            continue
        named = [(n, m) for n, m in model.named_modules() if n == target or n.endswith("." + target)]
        hits = [m for n, m in named if n not in left_out]
        if any(isinstance(m, torch.nn.Linear) for n, m in named) and not any(
            isinstance(m, torch.nn.Linear) for m in hits
        ):
            raise LoraTargetError(
                f"model.lora.targets: {target!r} matches only layers of the vision tower, which "
                "model.freeze_vision keeps frozen (no adapter there either): name a layer of the "
                "language model, or set model.freeze_vision=false to adapt the tower too"
            )
        if head is not None and any(m is head for m in hits):
            raise LoraTargetError(
                f"model.lora.targets: {target!r} is the output head, which the learner's fused "
                f"log-prob kernel reads directly, so an adapter there would not train: leave it out "
                f"(the model's linear modules: {linear})"
            )
        if not any(isinstance(m, torch.nn.Linear) for m in hits):
            raise LoraTargetError(
                f"model.lora.targets: {target!r} matches no linear module of the model; its linear "
                f"modules are: {linear} (or give {ALL_LINEAR})"
            )


def attach_lora(
    model: Any, settings: LoraSettings, adapter: str | Path | None = None, exclude: Sequence[str] = ()
) -> Any:
    """`model` (a transformers model) with peft's LoRA layers: a `PeftModel` whose base weights
    are frozen. With `adapter` (a directory in peft's format, a checkpoint's ``model/``) its
    weights are loaded into the new layers, which must have the same shapes
    (`AdapterMismatch` otherwise). `exclude`: module names that get no adapter whatever the
    targets say (a frozen vision tower's layers: `frozen_tower_modules`)."""
    from peft import LoraConfig, get_peft_model

    check_targets(model, settings.targets, exclude)
    targets: str | list[str] = ALL_LINEAR if ALL_LINEAR in settings.targets else list(settings.targets)
    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        target_modules=targets,
        lora_dropout=settings.dropout,
        exclude_modules=list(exclude) or None,
    )
    peft = get_peft_model(model, config)
    if adapter is not None:
        where = f"the adapter in {adapter}"
        saved = LoraAdapter.load(adapter)
        mine = config_of(peft)
        if saved.config.get("r") != mine["r"] or saved.config.get("lora_alpha") != mine["lora_alpha"]:
            raise AdapterMismatch(
                f"{where} has r={saved.config.get('r')}, alpha={saved.config.get('lora_alpha')}, but "
                f"model.lora has r={settings.r}, alpha={settings.alpha}: resume with the run's own "
                "model.lora settings, or start a new run.dir"
            )
        apply_adapter(peft.get_base_model(), saved, where=where)
    return peft


def config_of(peft: Any) -> dict[str, Any]:
    """The adapter's peft config as ``adapter_config.json`` holds it."""
    return dict(peft.peft_config["default"].to_dict())


def adapter_of(peft: Any) -> LoraAdapter:
    """The adapter of `peft` as engines take it (peft's saved naming, as
    ``get_peft_model_state_dict`` gives it): detached copies, so that the learner's next step
    cannot change what an engine is still loading."""
    tensors = {k: p.detach().clone() for k, p in lora_parameters(peft.get_base_model()).items()}
    return LoraAdapter(config_of(peft), tensors)


async def push_policy(engine: InferenceEngine, model: Any, peft: Any | None) -> int:
    """Send the engine the policy after an update: the adapter alone when training LoRA
    (`peft`), else `model`'s full state dict. Returns the bytes sent."""
    if peft is not None:
        adapter = adapter_of(peft)
        await engine.update_adapter(adapter)
        return adapter.nbytes
    state = model.state_dict()
    await engine.update_weights(state)
    return sum(t.numel() * t.element_size() for t in state.values())
