"""Per-instance outputs under the run directory.

    <run>/instances/<instance id>/sample-<k>/
        transcript.json      the chat: system prompt, task, every reply and observation
        infos.json           the env's info of every step (verifier results at the end)
        trajectory.parquet   model agent: token ids, log-probs, loss mask (arborl.agents.trajectory)
        patch.diff           SWE tasks: the model patch
        grade.json, test.log SWE tasks: the grading report and the harness output
        error.txt            when the attempt failed (infra error, timeout, harness error)

A retried attempt overwrites its sample's directory.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from .drivers import EpisodeRecord
from .grading import SWEGrade


def instance_dir(run_dir: Path, instance_id: str, sample: int) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "__", instance_id).strip("._") or "instance"
    return run_dir / "instances" / safe / f"sample-{sample}"


def _dump(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False, default=str), encoding="utf-8")


def write_outputs(
    run_dir: Path,
    instance_id: str,
    sample: int,
    record: EpisodeRecord | None,
    grade: SWEGrade | None = None,
    error: str | None = None,
) -> Path:
    """Write what one attempt produced; returns the directory (relative paths go in the store)."""
    out = instance_dir(run_dir, instance_id, sample)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if record is not None:
        _dump(out / "transcript.json", record.messages)
        _dump(out / "infos.json", [{k: v for k, v in i.items() if k != "model_patch"} for i in record.infos])
        patch = record.final("model_patch")
        if isinstance(patch, str):
            (out / "patch.diff").write_text(patch, encoding="utf-8")
        if record.trajectory is not None:
            from arborl.agents.trajectory import write_trajectories

            write_trajectories(out / "trajectory.parquet", [record.trajectory])
    if grade is not None:
        _dump(out / "grade.json", grade.model_dump(exclude={"log"}))
        (out / "test.log").write_text(grade.log, encoding="utf-8")
    if error:
        (out / "error.txt").write_text(error + "\n", encoding="utf-8")
    return out
