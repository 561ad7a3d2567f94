"""Checkpoints that a SIGKILL cannot tear: everything needed to continue a run exactly.

    runs/<run>/checkpoints/step-000040/
        model/              save_pretrained (safetensors) + tokenizer: loadable on its own
        trainer_state.pt    optimiser, schedule, RNG states, policy version, data cursor,
                            trained / dropped / buffered group indices, run progress
    runs/<run>/checkpoints/latest       "step-000040"

A checkpoint is written to a temporary directory and renamed into place, then `latest` is
replaced atomically; a crash at any point leaves the previous checkpoint intact. The
trajectories themselves are not copied: they are in the run's store already
(`arborl.trainer.local.trajectory_store`), and the state lists which groups were trained on.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arborl.agents.engines.weights import latest_checkpoint


@dataclass
class RunState:
    """The trainer's own progress (everything but weights and optimiser)."""

    version: int = 0  # policy version: RL updates applied
    sft_steps: int = 0  # warm-start steps done
    sft_planned: int = 0  # warm-start steps the time budget kept (0: not planned; sft.steps)
    cursor: int = 0  # next task index to dispatch
    trained: list[int] = field(default_factory=list)  # group indices trained on, in order
    dropped: list[int] = field(default_factory=list)  # group indices dropped as too stale
    buffered: list[int] = field(default_factory=list)  # finished, not yet trained (in the store)
    elapsed_s: float = 0.0  # wall time of the run so far (over resumes)
    best_success: float = 0.0


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


class Checkpointer:
    """Saves and finds checkpoints under ``<run>/checkpoints``; keeps the newest `keep`."""

    def __init__(self, run_dir: str | Path, keep: int = 2) -> None:
        self.dir = Path(run_dir) / "checkpoints"
        self.keep = keep

    def latest(self) -> Path | None:
        return latest_checkpoint(self.dir)

    def save(self, model: Any, tokenizer: Any, learner_state: dict[str, Any], run: RunState) -> Path:
        name = f"step-{run.version:06d}-sft{run.sft_steps:05d}"
        final = self.dir / name
        tmp = self.dir / f".{name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        model.save_pretrained(tmp / "model")
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp / "model")
        state = {"learner": learner_state, "run": asdict(run), "rng": rng_state()}
        torch.save(state, tmp / "trainer_state.pt")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        pointer = self.dir / f".latest.tmp-{os.getpid()}"
        pointer.write_text(name)
        os.replace(pointer, self.dir / "latest")
        self._prune(keep_name=name)
        return final

    def load(self, path: Path) -> tuple[dict[str, Any], RunState]:
        """(learner state, run state); restores the RNG states too."""
        state = torch.load(path / "trainer_state.pt", weights_only=False)
        set_rng_state(state["rng"])
        return state["learner"], RunState(**state["run"])

    def _prune(self, keep_name: str) -> None:
        done = sorted(p for p in self.dir.glob("step-*") if p.is_dir())
        for old in done[: max(0, len(done) - self.keep)]:
            if old.name != keep_name:
                shutil.rmtree(old, ignore_errors=True)
        for stale in self.dir.glob(".*.tmp-*"):  # left by a killed writer
            shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
