"""Suites from a user's own files: `arborl eval suite=PATH`.

    suite = suite_from_path("my-instances.jsonl", repos_dirs=["/data/repos"])   # SWE-bench
    suite = suite_from_path("osworld/examples/os")                               # OSWorld JSONs

What PATH may be:

- SWE-bench instances: a `.jsonl` / `.json` file, or a `datasets` `save_to_disk` directory
  (it holds `dataset_info.json` or `dataset_dict.json`). Each instance's repository is read
  from `repos_dirs` (directories or mapping files holding bundles, bare mirrors or checkouts:
  `arborl.tasks.swebench.repos`); its environment is the first of `environments` (a JSON list
  of `SWEEnvironment`), the registry (`arborl.tasks.swebench.specs`), the pytest default, with
  the repository's package dirs on the path unless it sets `python_path`
  (`arborl.tasks.swebench.layout`). Gold policy: apply the instance's `patch`; empty: submit
  at once.
- OSWorld tasks: a task `.json` file (an object with `instruction` and `evaluator`), or a
  directory of them (searched recursively). A `gold.json` beside them (task id → scripted
  steps, as desktop-mini's) gives the gold policy; empty: DONE at once.

What a file holds is decided by its content, not its name. A file that is neither says so.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from .osworld import GOLD_FILE, ScriptedDesktopPolicy, load_osworld_dir, load_osworld_task
from .spec import CodeTask, Task
from .suites import Suite, SuiteError
from .swebench import SWEEnvironment, environment_for, load_environments, load_instances, to_code_task
from .swebench.repos import find_repository


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


def load_swe_file(
    path: str | Path,
    repos_dirs: Sequence[str | Path] = (),
    environments: Sequence[SWEEnvironment] = (),
    split: str | None = None,
) -> list[CodeTask]:
    """The portable CodeTasks of a SWE-bench file (repositories read from `repos_dirs`)."""
    tasks = []
    sources: dict[str, Any] = {}
    for inst in load_instances(path, split=split):
        if inst.repo not in sources:
            sources[inst.repo] = find_repository(inst.repo, repos_dirs)
        files = sources[inst.repo].files_at(inst.base_commit)
        env = environment_for(inst, list(environments))
        tasks.append(to_code_task(inst, env, repo_files=files, metadata={"suite": str(path)}))
    return tasks


def _osworld_tasks(path: Path) -> list[Task]:
    return list(load_osworld_dir(path)) if path.is_dir() else [load_osworld_task(path)]


def osworld_gold(gold_file: Path, task: Task) -> ScriptedDesktopPolicy:
    gold = json.loads(gold_file.read_text(encoding="utf-8"))
    if task.id not in gold:
        raise SuiteError(f"{gold_file} has no scripted solution for {task.id!r}")
    return ScriptedDesktopPolicy(gold[task.id])


def suite_from_path(
    name: str,
    *,
    repos_dirs: Sequence[str | Path] = (),
    environments: str | Path | None = None,
    split: str | None = None,
) -> Suite:
    """A Suite for the file or directory `name` (see the module doc)."""
    path = Path(name)
    kind = detect_kind(path)
    if kind == "swe":
        envs = load_environments(environments) if environments else []
        return Suite(
            name,
            "arborl/Code-v0",
            partial(load_swe_file, path, tuple(repos_dirs), tuple(envs), split),
            description=f"SWE-bench instances from {path}",
            gold="arborl.tasks.swe_mini:gold_policy",
            empty="arborl.tasks.swe_mini:empty_policy",
            max_turns=30,
            tags=("code", "swe-bench", "user"),
        )
    root = path if path.is_dir() else path.parent
    gold_file = root / GOLD_FILE
    return Suite(
        name,
        "arborl/Desktop-v0",
        partial(_osworld_tasks, path),
        description=f"OSWorld tasks from {path}",
        env_kwargs={"screen_width": 1920, "screen_height": 1080},  # OSWorld's screen
        gold=partial(osworld_gold, gold_file) if gold_file.is_file() else None,
        empty="arborl.tasks.osworld:desktop_mini_empty",
        max_turns=15,
        tags=("desktop", "osworld", "user"),
    )
