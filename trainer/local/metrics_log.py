"""Training metrics: JSONL (always), TensorBoard (always), Weights & Biases (when configured),
and what an evaluation reports (`success_metrics`).

    runs/<run>/metrics.jsonl     one object per event: {"step", "phase", "time_s", ...metrics}
    runs/<run>/tensorboard/      `tensorboard --logdir runs/<run>/tensorboard`

Each JSONL line is flushed when written, so a killed run keeps every step it logged. On
resume, lines past the checkpoint's step are kept but marked as a rolled-back branch
(``"rolled_back": true``) so curves show the lineage that continued.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from arborl.agents import AgentEpisode, Trajectory
from arborl.tasks import Suite, succeeded


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLogger:
    """Writes metric events to every configured sink."""

    def __init__(
        self, run_dir: str | Path, wandb: Mapping[str, Any] | None = None, config: Any = None
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self._file = self.path.open("a", encoding="utf-8")
        self._tb: Any = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))
        except ImportError:  # tensorboard is optional; JSONL is the record
            self._tb = None
        self._wandb: Any = None
        if wandb and wandb.get("project"):
            import wandb as wandb_lib

            self._wandb = wandb_lib.init(config=config, dir=str(self.run_dir), **dict(wandb))

    def mark_rolled_back(self, after: Mapping[str, int]) -> None:
        """Flag logged events beyond a resumed checkpoint (``after``: phase → last kept step)."""
        self._file.close()
        lines = self.path.read_text(encoding="utf-8").splitlines()
        out = []
        for line in lines:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:  # a line torn by the kill
                continue
            phase, step = event.get("phase"), event.get("step", 0)
            if phase in after and step > after[phase]:
                event["rolled_back"] = True
            out.append(json.dumps(event))
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in out), encoding="utf-8")
        tmp.replace(self.path)
        self._file = self.path.open("a", encoding="utf-8")

    def log(self, phase: str, step: int, metrics: Mapping[str, Any]) -> None:
        event = {
            "phase": phase,
            "step": step,
            "time": time.time(),
            **{k: _clean(v) for k, v in metrics.items()},
        }
        self._file.write(json.dumps(event) + "\n")
        self._file.flush()
        numeric = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float) and math.isfinite(v)}
        if self._tb is not None:
            for k, v in numeric.items():
                self._tb.add_scalar(f"{phase}/{k}", v, step)
        if self._wandb is not None:
            self._wandb.log({f"{phase}/{k}": v for k, v in numeric.items()}, step=step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def read_metrics(run_dir: str | Path, include_rolled_back: bool = False) -> list[dict[str, Any]]:
    """The events of a run (the continued lineage unless `include_rolled_back`)."""
    out = []
    with (Path(run_dir) / "metrics.jsonl").open(encoding="utf-8") as f:
        for line in f:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if include_rolled_back or not event.get("rolled_back"):
                out.append(event)
    return out


def success_metrics(
    episodes: Sequence[AgentEpisode], tasks: Sequence[Any] = (), suite: Suite | None = None
) -> dict[str, float]:
    """Success rate and shape of a set of episodes (an evaluation's headline numbers); with
    the tasks, also the success rate per task kind (`success/<kind>`, from the task's
    ``metadata["kind"]``) where tasks say theirs. Success is the suite's (`Suite.success`,
    what `arborl eval` counts too); without one, the default suite's rule."""
    success = suite.success if suite is not None else succeeded
    trajs: list[Trajectory] = [e.trajectory for e in episodes]
    n = max(1, len(trajs))
    kinds: dict[str, list[bool]] = {}
    for task, t in zip(tasks, trajs, strict=False):  # no tasks given: no kinds
        kind = (getattr(task, "metadata", None) or {}).get("kind")
        if kind:
            kinds.setdefault(str(kind), []).append(success(t.outcome_reward))
    return {
        **{f"success/{k}": sum(v) / len(v) for k, v in sorted(kinds.items())},
        "success": sum(success(t.outcome_reward) for t in trajs) / n,
        "reward": sum(t.outcome_reward for t in trajs) / n,
        "turns": sum(len(t.turns) for t in trajs) / n,
        "response_tokens": sum(t.num_response_tokens for t in trajs) / n,
        "truncated": sum(t.truncation is not None for t in trajs) / n,
        "errors": sum(e.error is not None for e in episodes) / n,
    }
