"""Reading OSWorld task files into `DesktopTask`s, one file or a folder of them.

`support` is what the desktop that will run them can do (`arborl.envs.desktop.support.DESKTOP`
for the desktop env): given, a task it cannot run is refused here, with the reason; None
checks OSWorld's format only (the env checks the rest when the task reaches it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .cache import default_download_cache
from .task import DesktopSupport, DesktopTask, TaskNeedsRoot, UnsupportedOSWorldFeature

#: A folder's scripted solutions (task id → steps), not a task.
GOLD_FILE = "gold.json"
_INFO_KEYS = (
    "source",
    "snapshot",
    "related_apps",
    "trajectory",
    "proxy",
    "fixed_ip",
    "possibility_of_env_change",
)


def load_osworld_task(
    source: str | Path | Mapping[str, Any],
    *,
    support: DesktopSupport | None = None,
    base_dir: str | Path | None = None,
    download_cache: str | Path | None = None,
) -> DesktopTask:
    """Read one OSWorld task (a JSON file path or the parsed dict) into a `DesktopTask`.

    `download_cache` (default `default_download_cache()`) holds the files of `download` steps.

    Raises `UnsupportedOSWorldFeature` for what `support` cannot run (or what no desktop can:
    uncached downloads, root), `ValueError` for malformed data; both name the task.
    """
    if isinstance(source, str | Path):
        path = Path(source)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: cannot read an OSWorld task: {e}") from e
        base_dir = base_dir or path.parent
        where = str(path)
    else:
        data, where = dict(source), str(source.get("id", "<task>"))
    if not isinstance(data, dict):
        raise ValueError(f"{where}: an OSWorld task is a JSON object, got {type(data).__name__}")
    known = {"id", "instruction", "config", "evaluator", *_INFO_KEYS}
    osworld_info = {k: v for k, v in data.items() if k in _INFO_KEYS or k not in known}
    fields = {
        "id": data.get("id", ""),
        "instruction": data.get("instruction", ""),
        "config": tuple(data.get("config") or ()),
        "evaluator": data.get("evaluator") or {},
        "base_dir": str(base_dir) if base_dir is not None else None,
        "download_cache": str(download_cache or default_download_cache()),
        "metadata": {"osworld": osworld_info},
    }
    return _validate(fields, support, where)


def check_task(task: DesktopTask, support: DesktopSupport) -> DesktopTask:
    """`task` again, validated with `support` (raises as `load_osworld_task` does)."""
    return _validate(task.model_dump(), support, task.id)


def _validate(fields: Mapping[str, Any], support: DesktopSupport | None, where: str) -> DesktopTask:
    try:
        return DesktopTask.model_validate(fields, context={"support": support})
    except UnsupportedOSWorldFeature as e:
        raise UnsupportedOSWorldFeature(f"{where}: {e}") from None
    except ValidationError as e:
        causes = [(err.get("ctx") or {}).get("error") for err in e.errors()]
        kind: type[ValueError] = ValueError
        for typed in (TaskNeedsRoot, UnsupportedOSWorldFeature):
            if any(isinstance(c, typed) for c in causes):
                kind = typed
                break
        raise kind(f"{where}: {_brief(e)}") from None


def _brief(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def load_osworld_dir(directory: str | Path, *, support: DesktopSupport | None = None) -> list[DesktopTask]:
    """Every `*.json` task file under `directory` (sorted by path), `gold.json` excepted.

    A folder with any file that cannot run is refused as a whole, the error counting them
    (how many need root) and giving each one's reason: a suite never runs short silently."""
    root = Path(directory)
    files = sorted(p for p in root.rglob("*.json") if p.name != GOLD_FILE)
    if not files:
        raise ValueError(f"no OSWorld task files under {root}")
    tasks, refused = [], []
    for p in files:
        try:
            tasks.append(load_osworld_task(p, support=support))
        except ValueError as e:
            refused.append(e)
    if refused:
        kind: type[ValueError] = ValueError
        for typed in (TaskNeedsRoot, UnsupportedOSWorldFeature):
            if all(isinstance(e, typed) for e in refused):
                kind = typed
                break
        root_count = sum(isinstance(e, TaskNeedsRoot) for e in refused)
        raise kind(
            f"{len(refused)} of {len(files)} task files under {root} cannot run here "
            f"({root_count} of them need root): " + "; ".join(str(e) for e in refused)
        )
    return tasks
