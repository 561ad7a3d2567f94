"""LoRA adapters between the trainer and engines, in peft's own format.

A `LoraAdapter` is what a LoRA run sends an engine after each update instead of the full
weights: peft's LoRA config (a dict, as ``adapter_config.json`` holds it) and the adapter's
tensors named as peft's ``save_pretrained`` names them::

    base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight     [r, in]
    base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight     [out, r]

so that a directory written by `LoraAdapter.save` (or by ``PeftModel.save_pretrained``: a
run's checkpoint) is what `PeftModel.from_pretrained` and vLLM's ``LoRARequest`` load, and an
adapter read back from one is what the trainer sent.

An engine applies an adapter over its base weights (`apply_adapter`: peft's LoRA layers are
injected into the model the first time, the tensors copied into them after), never merged
into them, so the next adapter replaces the last one exactly. An adapter that does not fit
the model (another base, another rank than the engine's layers) is an `AdapterMismatch`
naming what differs and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .base import EngineError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


class AdapterMismatch(EngineError):
    """A LoRA adapter does not fit the model it is applied to; the message says how to fix it."""


@dataclass(frozen=True)
class LoraAdapter:
    """A LoRA adapter: peft's config (``LoraConfig.to_dict()``, JSON-able) and its tensors in
    peft's saved naming."""

    config: Mapping[str, Any]
    tensors: Mapping[str, torch.Tensor]

    @property
    def nbytes(self) -> int:
        """Bytes of the adapter's tensors (what a sync moves)."""
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    @property
    def rank(self) -> int:
        """The largest LoRA rank of any layer (``r``, or a ``rank_pattern`` entry)."""
        return max([int(self.config["r"]), *map(int, (self.config.get("rank_pattern") or {}).values())])

    def save(self, directory: str | Path) -> Path:
        """Write ``adapter_config.json`` and ``adapter_model.safetensors`` into `directory`."""
        from safetensors.torch import save_file

        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        (path / ADAPTER_CONFIG).write_text(json.dumps(_jsonable(self.config), indent=2))
        save_file(
            {k: v.detach().to("cpu").contiguous() for k, v in self.tensors.items()}, path / ADAPTER_WEIGHTS
        )
        return path

    @classmethod
    def load(cls, directory: str | Path) -> LoraAdapter:
        """The adapter saved in `directory` (by `save` or peft's ``save_pretrained``)."""
        from safetensors.torch import load_file

        path = Path(directory)
        if not is_adapter_dir(path) or not (path / ADAPTER_WEIGHTS).exists():
            raise AdapterMismatch(
                f"{path} holds no LoRA adapter ({ADAPTER_CONFIG} and {ADAPTER_WEIGHTS}): save one "
                "with PeftModel.save_pretrained, or point at a run or checkpoint trained with model.lora.r > 0"
            )
        return cls(json.loads((path / ADAPTER_CONFIG).read_text()), load_file(str(path / ADAPTER_WEIGHTS)))


def is_adapter_dir(path: str | Path) -> bool:
    """Whether `path` is a directory holding a peft adapter (``adapter_config.json``)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def base_model_of(path: str | Path) -> str:
    """The base model an adapter directory was trained on (its ``base_model_name_or_path``);
    any other path as given."""
    if not is_adapter_dir(path):
        return str(path)
    base = json.loads((Path(path) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base:
        raise AdapterMismatch(
            f"{Path(path) / ADAPTER_CONFIG} names no base_model_name_or_path: add the base model's "
            "directory there"
        )
    if not Path(base).exists() and Path(base).is_absolute():
        raise AdapterMismatch(
            f"the adapter in {path} was trained on {base}, which is not on this machine: copy the "
            f"base model there, or set base_model_name_or_path in its {ADAPTER_CONFIG} to where it is"
        )
    return str(base)


def has_lora_layers(model: Any) -> bool:
    from peft.tuners.lora import LoraLayer

    return any(isinstance(m, LoraLayer) for m in model.modules())


def apply_adapter(model: Any, adapter: LoraAdapter, where: str = "the adapter") -> None:
    """Set `model`'s LoRA weights to `adapter`'s, in place: peft's LoRA layers are injected the
    first time (``inject_adapter_in_model``), and later adapters of the same shape are copied
    into them. Raises `AdapterMismatch` when the adapter does not fit: a target module the
    model lacks, a tensor of another shape, or layers the adapter leaves out."""
    from peft import LoraConfig, inject_adapter_in_model

    if not has_lora_layers(model):
        config = LoraConfig(
            **{k: v for k, v in adapter.config.items() if k not in ("peft_type", "auto_mapping")}
        )
        config.inference_mode = False  # keep the layers' weights as parameters we may overwrite
        try:
            inject_adapter_in_model(config, model)
        except ValueError as e:  # peft: "Target modules ... not found in the base model"
            raise AdapterMismatch(f"{where} does not fit the model: {e}. {_fix(adapter)}") from None
    else:  # the layers' scaling (alpha / r) is fixed when they are made: it must be the adapter's
        layers = getattr(model, "peft_config", {}).get("default")
        have = _scaling(layers.to_dict()) if layers is not None else None
        if have is not None and have != _scaling(adapter.config):
            raise AdapterMismatch(
                f"{where} has LoRA scaling {_scaling(adapter.config)}, the model's LoRA layers {have}: "
                "send adapters of the settings the engine started with (model.lora)"
            )
    params = lora_parameters(model)
    own = {k: tuple(p.shape) for k, p in params.items()}
    theirs = {k: tuple(t.shape) for k, t in adapter.tensors.items()}
    wrong = [f"{k} is {s}, the model's {own[k]}" for k, s in theirs.items() if k in own and own[k] != s]
    absent = sorted(set(theirs) - set(own))
    left_out = sorted(set(own) - set(theirs))
    if wrong or absent or left_out:
        detail = "; ".join(
            [*wrong[:3], *(f"no layer {k} in the model" for k in absent[:3])]
            + [f"no tensor for the model's {k}" for k in left_out[:3]]
        )
        raise AdapterMismatch(f"{where} does not fit the model: {detail}. {_fix(adapter)}")
    with torch.no_grad():  # straight into the parameters (peft's loader walks the whole model)
        for key, value in adapter.tensors.items():
            params[key].copy_(value)


def load_with_adapter(path: str, load: Any) -> Any:
    """`load(path)` (a model loader taking a path), or for an adapter directory `load` of its
    base model with the adapter applied (unmerged)."""
    if not is_adapter_dir(path):
        return load(path)
    model = load(base_model_of(path))
    apply_adapter(model, LoraAdapter.load(path), where=f"the adapter in {path}")
    return model


def lora_parameters(model: Any) -> dict[str, torch.nn.Parameter]:
    """The model's LoRA parameters of peft's ``default`` adapter, keyed as peft saves them:
    ``X.lora_A.default.weight`` (a parameter of the model, whose LoRA layers peft injected in
    place) is ``base_model.model.X.lora_A.weight`` (peft's ``get_peft_model_state_dict``)."""
    return {
        "base_model.model." + n.replace(".default.", ".").removesuffix(".default"): p
        for n, p in model.named_parameters()
        if ".lora_" in n and ".default" in n
    }


def _scaling(config: Mapping[str, Any]) -> tuple[Any, ...]:
    """What sets a LoRA layer's scaling (alpha / r, or alpha / sqrt(r) with rslora)."""
    return tuple(
        config.get(k) or None for k in ("r", "lora_alpha", "use_rslora", "rank_pattern", "alpha_pattern")
    )


def _fix(adapter: LoraAdapter) -> str:
    base = adapter.config.get("base_model_name_or_path")
    return (
        f"It was trained on {base or 'an unnamed base'} with r={adapter.config.get('r')}: load it over that "
        "base model (model.path), with the same model.lora settings"
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return sorted(_jsonable(v) for v in value)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "value") and not isinstance(value, str | int | float | bool):  # an enum
        return value.value
    return value
