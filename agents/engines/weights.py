"""Moving weights between the trainer and engines: safetensors directories in HF layout.

`resolve_model_dir` finds the model directory in what a user points at (a model, a
checkpoint, a training run). A state dict is staged as ``model.safetensors`` in a fresh directory (``/dev/shm`` when
writable, so it never touches a disk) and engines that live in other processes (vLLM's
workers, a server) load it from there.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import torch

from .base import EngineError


def staging_dir(preferred: str | None = None) -> Path:
    """A fresh directory for staged weights: under `preferred`, else /dev/shm, else the temp dir."""
    base = preferred or ("/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir())
    Path(base).mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="arborl-weights-", dir=base))


def save_state_dict(state: Mapping[str, torch.Tensor], directory: Path) -> Path:
    """Write `state` as ``model.safetensors`` in `directory` (tied tensors are copied apart)."""
    from safetensors.torch import save_file

    seen: set[int] = set()
    tensors: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        t = value.detach().to("cpu").contiguous()
        if t.untyped_storage().data_ptr() in seen:  # safetensors refuses shared storage
            t = t.clone()
        seen.add(t.untyped_storage().data_ptr())
        tensors[name] = t
    path = directory / "model.safetensors"
    save_file(tensors, str(path))
    return path


def load_state_dict_from_path(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of the ``*.safetensors`` files in directory `path`."""
    from safetensors.torch import load_file

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise EngineError(f"no *.safetensors files in {path}: save with model.save_pretrained(path)")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    return state


def latest_checkpoint(checkpoints: str | Path) -> Path | None:
    """The complete checkpoint that ``<run>/checkpoints/latest`` names, or None.

    The trainer writes the layout (`arborl.trainer.local.checkpoint`): ``step-N/model/`` (a
    model directory) and ``step-N/trainer_state.pt``, written last, so a checkpoint without
    it is incomplete."""
    pointer = Path(checkpoints) / "latest"
    if not pointer.exists():
        return None
    path = Path(checkpoints) / pointer.read_text().strip()
    return path if (path / "trainer_state.pt").exists() else None


def resolve_model_dir(path: str | Path) -> str:
    """A model directory (or a LoRA adapter's: `adapters.LoraAdapter`) from what a user may
    point at: a model directory itself, a checkpoint (``.../step-N/``), a run's
    ``checkpoints/`` (its latest) or a run directory (its latest checkpoint). Anything else is
    returned as given (a hub id, for one)."""
    p = Path(path)
    for found in (p, p / "model"):  # a model, or a LoRA adapter (its base named inside)
        if (found / "config.json").exists() or (found / "adapter_config.json").exists():
            return str(found)
    latest = latest_checkpoint(p if p.name == "checkpoints" else p / "checkpoints")
    if latest is not None:
        return str(latest / "model")
    if p.exists():
        raise FileNotFoundError(
            f"{p} holds no model: give a model directory, a checkpoint or a run directory"
        )
    return str(path)
