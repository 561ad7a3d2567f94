"""Load SWE-bench instances from JSON, JSONL, or a Hugging Face `datasets` dataset.

    load_instances("instances.jsonl")                  # one instance per line
    load_instances("instances.json")                   # a list (or one object)
    load_instances("data/swe-bench-lite")              # a directory written by save_to_disk
    load_instances("data/swe-bench", split="test")     # ... of a DatasetDict
    load_instances(dataset)                            # a datasets.Dataset, or any iterable of dicts

`datasets` is imported only for dataset directories and objects (it is installed with verl;
no hub access is needed: datasets are read from disk).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .instance import SWEEnvironment, SWEInstance


class InstanceLoadError(ValueError):
    """Instances could not be read; the message names the file, line or row, and the field."""


def _validate(row: Any, where: str) -> SWEInstance:
    if not isinstance(row, Mapping):
        raise InstanceLoadError(f"{where}: expected a JSON object (an instance), got {type(row).__name__}")
    try:
        return SWEInstance.model_validate(dict(row))
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(map(str, err['loc'])) or 'instance'}: {err['msg']}" for err in e.errors()
        )
        raise InstanceLoadError(f"{where}: not a SWE-bench instance: {problems}") from None


def _from_json_file(path: Path) -> list[SWEInstance]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise InstanceLoadError(f"{path}:{n}: invalid JSON ({e.msg} at column {e.colno})") from None
            out.append(_validate(row, f"{path}:{n}"))
        return out
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InstanceLoadError(f"{path}: invalid JSON ({e.msg} at line {e.lineno})") from None
    rows = data if isinstance(data, list) else [data]
    return [_validate(row, f"{path}[{i}]") for i, row in enumerate(rows)]


def _from_dataset_dir(path: Path, split: str | None) -> list[SWEInstance]:
    try:
        import datasets
    except ImportError as e:  # pragma: no cover - datasets comes with verl
        raise InstanceLoadError(f"{path} is a dataset directory, but `datasets` is not installed") from e
    ds: Any = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        if split is None:
            if len(ds) != 1:
                raise InstanceLoadError(f"{path} holds splits {sorted(ds)}; pass split=")
            split = next(iter(ds))
        if split not in ds:
            raise InstanceLoadError(f"{path} has no split {split!r}; splits: {sorted(ds)}")
        ds = ds[split]
    return _from_rows(ds, str(path))


def _from_rows(rows: Iterable[Any], where: str) -> list[SWEInstance]:
    return [_validate(row, f"{where}[{i}]") for i, row in enumerate(rows)]


def load_instances(
    source: str | Path | Iterable[Mapping[str, Any]], split: str | None = None
) -> list[SWEInstance]:
    """Instances from a .json / .jsonl file, a `save_to_disk` directory, or rows (see module doc).

    Duplicate instance ids are an error.
    """
    if isinstance(source, str | Path):
        path = Path(source)
        if path.is_dir():
            instances = _from_dataset_dir(path, split)
        elif path.is_file() and path.suffix in (".json", ".jsonl"):
            instances = _from_json_file(path)
        elif path.exists():
            raise InstanceLoadError(f"{path}: expected a .json or .jsonl file, or a dataset directory")
        else:
            raise InstanceLoadError(f"{path} does not exist")
        where = str(path)
    else:
        instances = _from_rows(source, type(source).__name__)
        where = type(source).__name__
    ids = [i.instance_id for i in instances]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise InstanceLoadError(f"{where}: duplicate instance ids: {dup[:5]}")
    return instances


def load_environments(path: str | Path) -> list[SWEEnvironment]:
    """Environments from a JSON list of `SWEEnvironment` objects."""
    path = Path(path)
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
        return [SWEEnvironment.model_validate(r) for r in rows]
    except (OSError, json.JSONDecodeError, ValidationError) as e:
        raise InstanceLoadError(f"{path}: not a list of SWE environments: {e}") from None
