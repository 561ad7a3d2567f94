"""Suites from a user's own files: `arborl eval suite=PATH`.

    suite = suite_from_path("my-instances.jsonl", repos_dirs=["/data/repos"])   # SWE-bench
    suite = suite_from_path("osworld/examples/os")                               # OSWorld JSONs
    suite = suite_from_path("my-games/")                 # TextWorld games (.z8 + .json, tw-make's)
    suite = suite_from_path("variations.txt")            # ScienceWorld: `task_name, variation` lines
    suite = suite_from_path("levels.txt")                # Sokoban levels, the standard text format
    suite = suite_from_path("my-harbor-tasks/")          # Harbor / Terminal-Bench task folders

What PATH may be:

- SWE-bench instances: a `.jsonl` / `.json` file, or a `datasets` `save_to_disk` directory
  (it holds `dataset_info.json` or `dataset_dict.json`). Each instance's repository is read
  from `repos_dirs` (directories or mapping files holding bundles, bare mirrors or checkouts:
  `arborl.tasks.swebench.repos`); its environment is the first of `environments` (a JSON list
  of `SWEEnvironment`), the registry (`arborl.tasks.swebench.environments`), the pytest default, with
  the repository's package dirs on the path unless it sets `python_path`
  (`arborl.tasks.swebench.package_layout`). Gold policy: apply the instance's `patch`; empty: submit
  at once.
- OSWorld tasks: a task `.json` file (an object with `instruction` and `evaluator`), or a
  directory of them (searched recursively). A `gold.json` beside them (task id → scripted
  steps, as desktop-mini's) gives the gold policy; empty: DONE at once. With `desktop` (the
  desktop env's support), a task the desktop cannot run is refused when the suite loads.
- TextWorld games: a folder (searched recursively) of `.z8` games with TextWorld's `.json`
  beside each, as `tw-make` writes them, or one such game. Gold: the walkthrough; empty: look.
- A ScienceWorld list: a text file of `task_name, variation` lines (`#` comments), checked
  against the package's tasks and variation ranges. Gold: the package's gold action sequence.
- Harbor (Terminal-Bench 2) tasks: a task folder (it holds `task.toml`), or a folder holding
  such folders at any depth. Gold: the task's `solution/solve.sh`; empty: submit at once.
- Sokoban levels: a text file in the standard level format (`# $ . @ * +`, space floor,
  levels separated by blank lines, `;` comments). Gold: arborl's solver.

Each benchmark's own part is in its folder (`swebench/user.py`, `osworld/user.py`,
`textworld/user.py`, `scienceworld/user.py`, `sokoban/user.py`, `harbor/user.py`); this module
tells them apart.

What a file holds is decided by its content, not its name; what is none of these is refused
with an error naming all of them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .harbor import harbor_suite
from .harbor import has_tasks as has_harbor_tasks
from .osworld import GOLD_FILE, DesktopSupport
from .osworld.user import osworld_suite
from .scienceworld.user import looks_like_list, scienceworld_suite
from .sokoban.user import sokoban_suite
from .sokoban.xsb import looks_like_levels
from .suites import Suite, SuiteError
from .swebench.user import swe_suite
from .textworld.user import has_games, textworld_suite

#: What `suite=PATH` reads, for the errors that find none of it.
KNOWN = (
    "arborl reads as a suite: SWE-bench instances (.jsonl/.json of objects with instance_id, or a "
    "`datasets` folder), OSWorld task JSONs (objects with instruction and evaluator, a file or a "
    "folder), TextWorld games (a folder of .z8 games with the .json tw-make writes beside each), "
    "a ScienceWorld list (`task_name, variation` lines), Harbor task folders (each with a task.toml), "
    "Sokoban levels (the standard text format: "
    "# $ . @ * + and spaces, blank lines between levels); docs/eval.md, Your own files"
)
#: A text file larger than this is not read whole to guess what it is.
MAX_TEXT_BYTES = 32 * 1024 * 1024


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
    """`swe`, `osworld`, `textworld`, `scienceworld`, `harbor` or `sokoban`, from what `path`
    holds (raises SuiteError naming the formats it knows for anything else)."""
    if path.is_dir():
        if (path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file():
            return "swe"
        if has_harbor_tasks(path):
            return "harbor"
        if has_games(path):
            return "textworld"
        files = sorted(p for p in path.rglob("*.json") if p.name != GOLD_FILE)
        if not files:
            raise SuiteError(f"{path}: a folder with nothing in it that {KNOWN}")
        path = files[0]
    elif not path.is_file():
        raise SuiteError(f"{path} does not exist")
    elif has_games(path):
        return "textworld"
    try:
        obj = _first_object(path)
    except (OSError, UnicodeDecodeError) as e:
        raise SuiteError(f"{path}: cannot be read ({e})") from None
    except json.JSONDecodeError as e:
        return _text_kind(path, e)
    if isinstance(obj, dict) and "instance_id" in obj:
        return "swe"
    if isinstance(obj, dict) and "evaluator" in obj and "instruction" in obj:
        return "osworld"
    raise SuiteError(f"{path}: JSON, but not of a kind {KNOWN}")


def _text_kind(path: Path, not_json: json.JSONDecodeError) -> str:
    """`sokoban` or `scienceworld` for a text file that is not JSON."""
    if path.stat().st_size <= MAX_TEXT_BYTES:
        text = path.read_text(encoding="utf-8", errors="replace")
        if looks_like_levels(text):
            return "sokoban"
        if looks_like_list(text):
            return "scienceworld"
    raise SuiteError(f"{path}: not JSON ({not_json}) and not of another kind {KNOWN}")


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
    kind = detect_kind(path)
    if kind == "swe":
        return swe_suite(name, path, repos_dirs, environments, split)
    if kind == "textworld":
        return textworld_suite(name, path)
    if kind == "scienceworld":
        return scienceworld_suite(name, path)
    if kind == "sokoban":
        return sokoban_suite(name, path)
    if kind == "harbor":
        return harbor_suite(name, path)
    return osworld_suite(name, path, desktop)
