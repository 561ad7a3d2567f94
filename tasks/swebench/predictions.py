"""Read a predictions file, to grade without running an agent (SWE-bench's `--predictions_path`;
the grading: `arborl.envs.code.swe_grading`).

    arborl eval suite=instances.jsonl predictions=preds.jsonl swe.repos_dir=[/data/repos]

A predictions file is SWE-bench's format: a `.jsonl` file of objects, a `.json` list of them,
or a `.json` object keyed by instance id; each has `instance_id`, `model_patch` (a unified
diff; empty or null: no patch) and usually `model_name_or_path`. Only the suite's instances
that have a prediction are graded (as SWE-bench does); a prediction naming an instance the
suite lacks is an error, since it usually means the wrong suite or file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..task_types import Task


class PredictionsError(ValueError):
    """A predictions file could not be read; the message names the file and line or entry."""


def _check(row: Any, where: str) -> tuple[str, str | None]:
    if not isinstance(row, Mapping) or not isinstance(row.get("instance_id"), str):
        raise PredictionsError(f"{where}: a prediction is an object with an `instance_id` string")
    patch = row.get("model_patch")
    if patch is not None and not isinstance(patch, str):
        raise PredictionsError(f"{where}: `model_patch` must be a string (a unified diff) or null")
    return row["instance_id"], patch


def load_predictions(path: str | Path) -> dict[str, dict[str, Any]]:
    """instance id → the prediction (`model_patch`, `model_name_or_path`, ...)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise PredictionsError(f"{path}: cannot read predictions ({e})") from None
    rows: list[tuple[str, Any]] = []
    if path.suffix == ".jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((f"{path}:{n}", json.loads(line)))
                except json.JSONDecodeError as e:
                    raise PredictionsError(f"{path}:{n}: invalid JSON ({e.msg})") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise PredictionsError(f"{path}: invalid JSON ({e.msg} at line {e.lineno})") from None
        if isinstance(data, Mapping) and "instance_id" not in data:
            data = [{"instance_id": k, **v} if isinstance(v, Mapping) else v for k, v in data.items()]
        rows = [(f"{path}[{i}]", r) for i, r in enumerate(data if isinstance(data, list) else [data])]
    out: dict[str, dict[str, Any]] = {}
    for where, row in rows:
        iid, _ = _check(row, where)
        if iid in out:
            raise PredictionsError(f"{where}: a second prediction for {iid!r}")
        out[iid] = dict(row)
    return out


def select_predicted(tasks: list[Task], predictions: Mapping[str, Any], source: str) -> list[Task]:
    """The tasks that have a prediction (unknown instance ids are an error)."""
    known = {t.id for t in tasks}
    unknown = sorted(set(predictions) - known)
    if unknown:
        raise PredictionsError(
            f"{source}: {len(unknown)} prediction(s) for instances the suite does not have: {unknown[:5]}"
        )
    return [t for t in tasks if t.id in predictions]
