"""Suites from a user's own files: `arborl eval suite=PATH`.

    suite = suite_from_path("my-instances.jsonl", repos_dirs=["/data/repos"])   # SWE-bench
    suite = suite_from_path("osworld/examples/os")                               # OSWorld JSONs

What PATH may be:

- SWE-bench instances: a `.jsonl` / `.json` file, or a `datasets` `save_to_disk` directory
  (it holds `dataset_info.json` or `dataset_dict.json`). Each instance's repository is read
  from `repos_dirs` (directories or mapping files holding bundles, bare mirrors or checkouts:
  `arborl.tasks.swebench.repos`); its environment is the first of `environments` (a JSON list
  of `SWEEnvironment`), the registry (`arborl.tasks.swebench.environments`), the pytest default, with
  the repository's package dirs on the path unless it sets `python_path`
  (`arborl.tasks.swebench.layout`). Gold policy: apply the instance's `patch`; empty: submit
  at once.
- OSWorld tasks: a task `.json` file (an object with `instruction` and `evaluator`), or a
  directory of them (searched recursively). A `gold.json` beside them (task id → scripted
  steps, as desktop-mini's) gives the gold policy; empty: DONE at once. With `desktop` (the
  desktop env's support), a task the desktop cannot run is refused when the suite loads.

Each benchmark's own part is in its folder (`swebench/user.py`, `osworld/user.py`); this
module tells them apart.

What a file holds is decided by its content, not its name. A file that is neither says so.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .osworld import GOLD_FILE, DesktopSupport
from .osworld.user import osworld_suite
from .suites import Suite, SuiteError
from .swebench.user import swe_suite


def looks_like_path(name: str) -> bool:
    """Whether a `suite=` value names a file or directory rather than a registered suite."""
    return "/" in name or name.endswith((".json", ".jsonl")) or Path(name).exists()


def suite_slug(name: str) -> str:
    """A short name for a path suite (for run directories): the file or directory's stem."""
    return (Path(name.rstrip("/")).stem or "suite") if looks_like_path(name) else name


def _first_object(path: Path) -> Any:
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    return json.loads(line)
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return data[0] if isinstance(data, list) and data else data


def detect_kind(path: Path) -> str:
    """`swe` or `osworld` (raises SuiteError for anything else)."""
    if path.is_dir():
        if (path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file():
            return "swe"
        files = sorted(p for p in path.rglob("*.json") if p.name != GOLD_FILE)
        if not files:
            raise SuiteError(f"{path}: no .json task files and not a `datasets` directory")
        path = files[0]
    elif not path.is_file():
        raise SuiteError(f"{path} does not exist")
    try:
        obj = _first_object(path)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SuiteError(f"{path}: not JSON ({e})") from None
    if isinstance(obj, dict) and "instance_id" in obj:
        return "swe"
    if isinstance(obj, dict) and "evaluator" in obj and "instruction" in obj:
        return "osworld"
    raise SuiteError(
        f"{path}: neither SWE-bench instances (objects with instance_id) nor OSWorld tasks "
        "(objects with instruction and evaluator)"
    )


def suite_from_path(
    name: str,
    *,
    repos_dirs: Sequence[str | Path] = (),
    environments: str | Path | None = None,
    split: str | None = None,
    desktop: DesktopSupport | None = None,
) -> Suite:
    """A Suite for the file or directory `name` (see the module doc). `desktop`: what the
    desktop that will run OSWorld tasks can do (`arborl.envs.desktop.support.DESKTOP`), so that
    a task it cannot run is refused when the suite loads."""
    path = Path(name)
    if detect_kind(path) == "swe":
        return swe_suite(name, path, repos_dirs, environments, split)
    return osworld_suite(name, path, desktop)
