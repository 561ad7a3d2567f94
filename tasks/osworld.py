"""OSWorld task JSON: the `DesktopTask` type, its loader, and the `desktop-mini` suite.

An OSWorld task file looks like this (https://github.com/xlang-ai/OSWorld, evaluation_examples/):

    {"id": "...", "instruction": "...", "source": "...", "related_apps": [...],
     "config": [{"type": "open", "parameters": {"path": "/home/agent/notes.txt"}}, ...],
     "evaluator": {"func": "compare_text_file",            # or a list of names
                   "result": {"type": "vm_file", "path": "...", "dest": "notes.txt"},
                   "expected": {"type": "cache_file", "path": "want.txt"},
                   "options": {"ignore_blanks": true},       # per metric (a list with a list of funcs)
                   "conj": "and",                            # how a list of metrics combines
                   "postconfig": [...]}}                     # setup steps run before evaluating

This module only reads and checks that data (it imports nothing else of arborl); the desktop
env (`arborl.envs.desktop`) runs the steps, getters and metrics. Everything the env cannot do
in a container is refused here, at load time, with the name of the step, getter or metric and
the reason (`UnsupportedOSWorldFeature`), so a suite never fails half-way through a run.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .osworld_root import agent_root_problem, root_after_agent
from .osworld_tables import table_rules_problem
from .spec import Task

#: The sandbox image desktop tasks run in (`arborl sandbox build image=gui`).
GUI_IMAGE = "arborl/gui:latest"
DATA_DIR = Path(__file__).with_name("data")


class UnsupportedOSWorldFeature(ValueError):
    """A task uses a setup step, getter, metric or option the desktop env cannot run."""


class TaskNeedsRoot(UnsupportedOSWorldFeature):
    """The task needs root where the desktop sandbox gives none (`osworld_root.py`)."""


# ---- the vocabulary the desktop env implements ------------------------------------------
# name -> (required parameters, optional parameters). envs/desktop implements exactly these;
# tests/envs/desktop checks that both sides name the same set.
SETUP_STEPS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "launch": (frozenset({"command"}), frozenset({"shell"})),
    "open": (frozenset({"path"}), frozenset()),
    "execute": (frozenset({"command"}), frozenset({"shell", "stdout", "stderr", "until"})),
    "command": (frozenset({"command"}), frozenset({"shell", "stdout", "stderr", "until"})),
    "sleep": (frozenset({"seconds"}), frozenset()),
    "activate_window": (frozenset({"window_name"}), frozenset({"strict", "by_class"})),
    "close_window": (frozenset({"window_name"}), frozenset({"strict", "by_class"})),
    "upload_file": (frozenset({"files"}), frozenset()),
    "download": (frozenset({"files"}), frozenset()),
}
UNSUPPORTED_STEPS = {
    "chrome_open_tabs": "needs Google Chrome with remote debugging; the desktop image has no Chrome "
    "(the web env, arborl/Web-v0, drives Chromium)",
    "chrome_close_tabs": "needs Google Chrome with remote debugging",
    "update_browse_history": "needs a Chrome profile",
    "login": "needs network access to an online account",
    "googledrive": "needs network access to Google Drive",
    "change_wallpaper": "the desktop has no wallpaper manager",
    "tidy_desktop": "not implemented in OSWorld either",
    "act": "not implemented in OSWorld either",
    "replay": "not implemented in OSWorld either",
    "execute_with_verification": "not supported; use `execute` with `until`",
}
#: `open` picks the application by file name (xdg-open has no MIME database to ask here).
OPEN_WITH = {
    **dict.fromkeys((".txt", ".md", ".py", ".sh", ".json", ".log", ".conf", ".ini"), "mousepad"),
    **dict.fromkeys((".csv", ".tsv", ".xlsx", ".xls", ".ods", ".gnumeric"), "gnumeric"),
    **dict.fromkeys((".mp4", ".mkv", ".webm", ".avi", ".mov", ".ogv", ".mp3", ".ogg", ".wav"), "vlc"),
    "/": "pcmanfm",  # a directory (a path ending in "/" or without an extension)
}
#: OSWorld's Ubuntu apps that the desktop image lacks, with what it has instead.
MISSING_APPS = {
    "google-chrome": "chromium (or the web env)",
    "libreoffice": "gnumeric (spreadsheets) or mousepad (text)",
    "soffice": "gnumeric (spreadsheets) or mousepad (text)",
    "gimp": "nothing: there is no image editor",
    "code": "mousepad",
    "thunderbird": "nothing: there is no mail client",
    "gnome-terminal": "lxterminal (Ctrl+Alt+T) or xterm",
    "nautilus": "pcmanfm",
    "gedit": "mousepad",
}

#: The sandbox has no network, so a `download` step copies the file from a local cache, laid
#: out as OSWorld's own (`<root>/<task id>/<uuid5(URL)>_<file name>`, its SetupController's
#: names): OSWorld's `cache/` directory works as it is, and
#: `python -m arborl.tasks.osworld_fetch TASKS` fills one on a host with network.
DOWNLOAD_CACHE_ENV = "ARBORL_OSWORLD_CACHE"


def default_download_cache() -> Path:
    """`$ARBORL_OSWORLD_CACHE`, else `~/.cache/arborl/osworld`."""
    root = os.environ.get(DOWNLOAD_CACHE_ENV)
    return Path(root) if root else Path.home() / ".cache" / "arborl" / "osworld"


def cached_download(root: str | Path, task_id: str, url: str, path: str) -> Path:
    """Where the file a `download` step fetches from `url` to `path` is cached."""
    return Path(root) / task_id / f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_{os.path.basename(path)}"


def cached_cloud_file(root: str | Path, task_id: str, dest: str) -> Path:
    """Where the file a `cloud_file` getter fetches to `dest` is cached (OSWorld's getter keeps
    it as `<cache>/<task id>/<dest>`)."""
    return Path(root) / task_id / dest


def getter_files(getter: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(path, dest) of each file a `vm_file` or `cloud_file` getter copies (`multi`: lists of
    both); a `cloud_file`'s path is its URL."""
    if getter.get("multi", False):
        return [(str(u), str(d)) for u, d in zip(getter["path"], getter["dest"], strict=True)]
    return [(str(getter["path"]), str(getter["dest"]))]


GETTERS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "vm_file": (frozenset({"path", "dest"}), frozenset({"multi", "gives"})),
    "cloud_file": (frozenset({"path", "dest"}), frozenset({"multi", "gives"})),
    "vm_command_line": (frozenset({"command"}), frozenset({"shell"})),
    "vm_command_error": (frozenset({"command"}), frozenset({"shell"})),
    "rule": (frozenset({"rules"}), frozenset()),
    "cache_file": (frozenset({"path"}), frozenset()),
    "list_directory": (frozenset({"path"}), frozenset()),
    "vm_file_exists_in_vm_folder": (frozenset({"folder_name", "file_name"}), frozenset()),
    "vm_screen_size": (frozenset(), frozenset()),
    "vm_window_size": (frozenset({"app_class_name"}), frozenset()),
    "default_video_player": (frozenset(), frozenset()),
    "vm_terminal_output": (frozenset(), frozenset()),
    "accessibility_tree": (frozenset(), frozenset()),
    # arborl additions (OSWorld reads windows through its accessibility tree instead):
    "vm_active_window_title": (frozenset(), frozenset()),
    "vm_window_titles": (frozenset(), frozenset()),
}
UNSUPPORTED_GETTERS = {
    "vm_wallpaper": "the desktop has no wallpaper manager",
    "content_from_vm_file": "reads .xlsx rows with pandas/openpyxl; convert with `ssconvert` in a "
    "`vm_command_line` getter instead",
}

#: metric -> the options it accepts. Every metric but `infeasible` takes (result, expected).
METRICS: dict[str, frozenset[str]] = {
    "exact_match": frozenset(),
    "match_in_list": frozenset(),
    "is_in_list": frozenset(),
    "check_include_exclude": frozenset(),
    "fuzzy_match": frozenset(),
    "literal_match": frozenset({"type", "ignore_case"}),
    "compare_text_file": frozenset({"ignore_blanks", "ignore_case"}),
    "diff_text_file": frozenset(),
    "file_contains": frozenset(),
    "check_list": frozenset(),
    "check_csv": frozenset(),
    "compare_csv": frozenset({"strict", "ignore_case"}),
    "check_json": frozenset({"is_yaml"}),
    "check_direct_json_object": frozenset(),
    "compare_answer": frozenset(),
    "compare_result_files": frozenset(),
    # the `os` domain's
    "check_text_enlarged": frozenset(),
    "is_utc_0": frozenset(),
    "check_gnome_favorite_apps": frozenset(),
    "check_moved_jpgs": frozenset(),
    # multi_apps metrics that need only Debian packages
    "check_line_number": frozenset(),
    "check_image_file_size": frozenset(),
    # LibreOffice's files (office_metrics.py) and the accessibility tree (a11y_metrics.py)
    "compare_table": frozenset({"rules"}),
    "compare_docx_files": frozenset({"ignore_blanks", "ignore_case", "ignore_order", "content_only"}),
    "check_accessibility_tree": frozenset(),
    "infeasible": frozenset(),
}
#: Metrics that read only their `result` (OSWorld gives them no `expected`).
RESULT_ONLY_METRICS = frozenset({"check_text_enlarged", "is_utc_0"})
#: `method`s of check_json rules (OSWorld's `_match_value_to_rule`).
RULE_METHODS = ("re", "eq", "ne", "lt", "le", "gt", "ge", "approx", "str_list_eq")


class OSWorldStep(BaseModel):
    """One setup step: `{"type": ..., "parameters": {...}}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str
    parameters: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _supported(self) -> OSWorldStep:
        _check_params("setup step", self.type, self.parameters, SETUP_STEPS, UNSUPPORTED_STEPS)
        p = self.parameters
        if self.type in ("launch", "execute", "command"):
            _check_command(self.type, p["command"])
        elif self.type == "open":
            open_with(p["path"])
        elif self.type == "sleep" and not isinstance(p["seconds"], int | float):
            raise ValueError(f"sleep: `seconds` must be a number, got {p['seconds']!r}")
        elif self.type == "upload_file":
            files = p["files"]
            if not isinstance(files, list) or not all(
                isinstance(f, Mapping) and {"local_path", "path"} <= f.keys() for f in files
            ):
                raise ValueError("upload_file: `files` must be a list of {local_path, path}")
        return self


class OSWorldGetter(BaseModel):
    """A result/expected getter: `{"type": ..., <its parameters>}`."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: str

    @model_validator(mode="after")
    def _supported(self) -> OSWorldGetter:
        _check_params("getter", self.type, self.params, GETTERS, UNSUPPORTED_GETTERS)
        return self

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class OSWorldEvaluator(BaseModel):
    """The evaluator, normalised to lists: metric i gets result[i], expected[i], options[i]."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    func: tuple[str, ...]
    result: tuple[OSWorldGetter | None, ...] = ()
    expected: tuple[OSWorldGetter | None, ...] = ()
    options: tuple[dict[str, Any], ...] = ()
    conj: Literal["and", "or"] = "and"
    postconfig: tuple[OSWorldStep, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _as_lists(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        funcs = data.get("func")
        single = isinstance(funcs, str)
        n = 1 if single else len(funcs or [])
        for key in ("func", "result", "expected", "options"):
            value = data.get(key)
            if value is None or value == [] or value == {}:
                data[key] = [None] * n if key != "func" else []
            elif single:
                data[key] = [value]
        data["options"] = [o or {} for o in data["options"]]
        return data

    @model_validator(mode="after")
    def _consistent(self) -> OSWorldEvaluator:
        if not self.func:
            raise ValueError("evaluator.func is empty")
        n = len(self.func)
        for key in ("result", "expected", "options"):
            if len(getattr(self, key)) != n:
                raise ValueError(f"evaluator.{key} has {len(getattr(self, key))} entries for {n} metrics")
        for i, name in enumerate(self.func):
            if name not in METRICS:
                raise UnsupportedOSWorldFeature(
                    f"metric {name!r} is not supported by the desktop env; supported: {', '.join(METRICS)}"
                )
            if name == "infeasible":
                if n != 1:
                    raise ValueError("`infeasible` must be the only metric")
                continue
            if self.result[i] is None or (self.expected[i] is None and name not in RESULT_ONLY_METRICS):
                raise ValueError(f"metric {name!r} needs both a `result` and an `expected` getter")
            extra = set(self.options[i]) - METRICS[name]
            if extra:
                raise UnsupportedOSWorldFeature(
                    f"metric {name!r} does not support option(s) {sorted(extra)}; "
                    f"it takes {sorted(METRICS[name]) or 'none'}"
                )
            if name == "check_json":
                _check_rule_methods(self.expected[i])
            if name == "compare_table" and (problem := table_rules_problem(self.options[i], RULE_METHODS)):
                raise UnsupportedOSWorldFeature(problem)
            if name == "check_accessibility_tree":
                _check_tree_rules(self.expected[i])
        return self

    @property
    def infeasible(self) -> bool:
        return self.func == ("infeasible",)


class DesktopTask(Task):
    """An OSWorld-format desktop task: an instruction, setup steps, and an evaluator.

    `metadata["osworld"]` keeps the file's informational fields (`source`, `snapshot`,
    `related_apps`, ...); `base_dir` is where relative `upload_file` paths are read from.
    """

    kind: Literal["desktop"] = "desktop"
    instruction: str = Field(min_length=1)
    config: tuple[OSWorldStep, ...] = ()
    evaluator: OSWorldEvaluator
    image: str = Field(GUI_IMAGE, description="the desktop image (Xvfb, openbox, apps)")
    base_dir: str | None = Field(None, description="directory of the task file (for upload_file)")
    download_cache: str | None = Field(
        None, description="root of the cache `download` steps read (see `cached_download`)"
    )

    @model_validator(mode="after")
    def _no_root_for_the_agent(self) -> DesktopTask:
        ev = self.evaluator
        after_agent = [
            (f"postconfig step {i + 1}", s.parameters.get("command")) for i, s in enumerate(ev.postconfig)
        ]
        after_agent += [
            (f"getter {g.type}", g.params.get("command")) for g in (*ev.result, *ev.expected) if g is not None
        ]
        problem = agent_root_problem(self.id, self.instruction, ev.infeasible) or root_after_agent(
            after_agent
        )
        if problem:
            raise TaskNeedsRoot(problem)
        return self

    @model_validator(mode="after")
    def _uploads_exist(self) -> DesktopTask:
        for step in (*self.config, *self.evaluator.postconfig):
            if step.type == "upload_file":
                for f in step.parameters["files"]:
                    path = resolve_local(f["local_path"], self.base_dir)
                    if not path.is_file():
                        raise ValueError(f"upload_file: {f['local_path']!r} is not a file ({path})")
            if step.type == "download":
                root = self.download_cache or default_download_cache()
                for f in step.parameters["files"]:
                    if not f.get("url") or not f.get("path"):
                        raise ValueError(f"download: a file needs a url and a path, got {f}")
                    _require_cached(
                        f"download: {f['path']}", cached_download(root, self.id, f["url"], f["path"])
                    )
        for getter in (*self.evaluator.result, *self.evaluator.expected):
            if getter is not None and getter.type == "cloud_file":
                root = self.download_cache or default_download_cache()
                for _, dest in getter_files(getter.params):
                    _require_cached(f"cloud_file: {dest}", cached_cloud_file(root, self.id, dest))
        return self


def _require_cached(what: str, cached: Path) -> None:
    """Refuse a task whose `download` step or `cloud_file` getter has no file in the cache."""
    if not cached.is_file():
        raise UnsupportedOSWorldFeature(
            f"{what} is not in the download cache ({cached}); the sandboxes have no network. "
            "Fetch the task's files once on a host with network (python -m "
            f"arborl.tasks.osworld_fetch TASK_FILES), or point {DOWNLOAD_CACHE_ENV} at OSWorld's "
            "own cache/ directory"
        )


# ---- helpers ------------------------------------------------------------------------------
def _check_params(
    kind: str,
    name: str,
    params: Mapping[str, Any],
    known: Mapping[str, tuple[frozenset[str], frozenset[str]]],
    unsupported: Mapping[str, str],
) -> None:
    if name in unsupported:
        raise UnsupportedOSWorldFeature(f"{kind} {name!r} is not supported: {unsupported[name]}")
    if name not in known:
        raise UnsupportedOSWorldFeature(f"unknown {kind} {name!r}; supported: {', '.join(known)}")
    required, optional = known[name]
    missing = required - params.keys()
    if missing:
        raise ValueError(f"{kind} {name!r} is missing {sorted(missing)}")
    extra = params.keys() - required - optional
    if extra:
        raise UnsupportedOSWorldFeature(f"{kind} {name!r} does not support parameter(s) {sorted(extra)}")


def _command_words(command: Any) -> list[str]:
    if isinstance(command, str):
        try:
            return shlex.split(command)
        except ValueError:
            return command.split()
    if isinstance(command, list) and command and all(isinstance(c, str) for c in command):
        return list(command)
    raise ValueError(f"`command` must be a string or a non-empty list of strings, got {command!r}")


def _check_command(step: str, command: Any) -> None:
    for word in _command_words(command):
        app = Path(word).name
        if app in MISSING_APPS:
            raise UnsupportedOSWorldFeature(
                f"{step}: {app!r} is not installed in the desktop image; use {MISSING_APPS[app]}"
            )
    words = _command_words(command)
    if any("pyautogui" in w for w in words):
        if step == "launch":
            raise UnsupportedOSWorldFeature("launch: pyautogui code is replayed only from `execute` steps")
        _check_pyautogui(step, words)


#: pyautogui calls a setup command may make: the env replays them with xdotool (its actions).
REPLAYABLE_PYAUTOGUI = frozenset(
    {
        "click",
        "doubleClick",
        "tripleClick",
        "rightClick",
        "middleClick",
        "moveTo",
        "move",
        "dragTo",
        "drag",
        "mouseDown",
        "mouseUp",
        "scroll",
        "hscroll",
        "write",
        "typewrite",
        "press",
        "hotkey",
        "keyDown",
        "keyUp",
        "sleep",
    }
)


def _check_pyautogui(step: str, words: list[str]) -> None:
    """A pyautogui setup command must be `python -c CODE` with only replayable calls in CODE."""
    if not (len(words) == 3 and Path(words[0]).name in ("python", "python3") and words[1] == "-c"):
        raise UnsupportedOSWorldFeature(
            f"{step}: pyautogui is replayed only from a `python -c CODE` command, not {' '.join(words)[:120]!r}"
        )
    try:
        tree = ast.parse(words[2])
    except SyntaxError as e:
        raise ValueError(f"{step}: the pyautogui code is not valid Python ({e.msg})") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value.id if isinstance(node.func.value, ast.Name) else "?"
            name = node.func.attr
            if owner not in ("pyautogui", "time") or name not in REPLAYABLE_PYAUTOGUI:
                raise UnsupportedOSWorldFeature(
                    f"{step}: the pyautogui setup code calls {owner}.{name}, which the env cannot replay; "
                    f"it replays {', '.join(sorted(REPLAYABLE_PYAUTOGUI))}"
                )


def _check_rule_methods(getter: OSWorldGetter | None) -> None:
    if getter is None or getter.type != "rule":
        return
    rules = getter.params.get("rules") or {}
    for rule in [*rules.get("expect", []), *rules.get("unexpect", [])]:
        method = str(rule.get("method", ""))
        if method.split(".")[0].split(":")[0] not in RULE_METHODS:
            raise UnsupportedOSWorldFeature(f"check_json rule method {method!r}; supported: {RULE_METHODS}")


def _check_tree_rules(getter: OSWorldGetter | None) -> None:
    rules = getter.params.get("rules") if getter is not None and getter.type == "rule" else None
    if not isinstance(rules, list) or not all(
        isinstance(r, Mapping) and ("xpath" in r or "selectors" in r) for r in rules
    ):
        raise ValueError(
            "check_accessibility_tree needs a `rule` getter whose `rules` each give `xpath` or `selectors`"
        )


def open_with(path: str) -> str:
    """The application `open` starts for `path` (raises for types it has none for)."""
    name = Path(path.rstrip("/")).name
    suffix = Path(name).suffix.lower()
    if path.endswith("/") or not suffix:
        return OPEN_WITH["/"]
    if suffix in OPEN_WITH:
        return OPEN_WITH[suffix]
    raise UnsupportedOSWorldFeature(
        f"open: no application for {suffix!r} files ({path}); known: {', '.join(k for k in OPEN_WITH if k != '/')}"
    )


def resolve_local(local_path: str, base_dir: str | None) -> Path:
    """An `upload_file` local path: absolute, or relative to the task file's directory."""
    path = Path(local_path)
    return path if path.is_absolute() or base_dir is None else Path(base_dir) / path


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
    base_dir: str | Path | None = None,
    download_cache: str | Path | None = None,
) -> DesktopTask:
    """Read one OSWorld task (a JSON file path or the parsed dict) into a `DesktopTask`.

    `download_cache` (default `default_download_cache()`) holds the files of `download` steps.

    Raises `UnsupportedOSWorldFeature` for what the desktop env cannot run, `ValueError` for
    malformed data; both name the task.
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
    try:
        return DesktopTask(
            id=data.get("id", ""),
            instruction=data.get("instruction", ""),
            config=tuple(data.get("config") or ()),
            evaluator=data.get("evaluator") or {},
            base_dir=str(base_dir) if base_dir is not None else None,
            download_cache=str(download_cache or default_download_cache()),
            metadata={"osworld": osworld_info},
        )
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


def load_osworld_dir(directory: str | Path) -> list[DesktopTask]:
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
            tasks.append(load_osworld_task(p))
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


# ---- the desktop-mini suite ---------------------------------------------------------------
DESKTOP_MINI = DATA_DIR / "desktop-mini"
GOLD_FILE = "gold.json"


def load_desktop_mini() -> list[DesktopTask]:
    """The `desktop-mini` suite: text editor, file manager, terminal and spreadsheet tasks."""
    return load_osworld_dir(DESKTOP_MINI)


def _gold_steps(task_id: str) -> list[Any]:
    gold = json.loads((DESKTOP_MINI / GOLD_FILE).read_text(encoding="utf-8"))
    if task_id not in gold:
        raise KeyError(f"desktop-mini has no gold solution for {task_id!r}")
    return list(gold[task_id])


class ScriptedDesktopPolicy:
    """Replays a gold script: pyautogui action strings, plus two steps that read the screen.

    - ``{"wait_window": REGEX}``: reply WAIT until a window whose title matches is listed in
      ``info["windows"]`` (at most `max_waits` times), then go on.
    - ``{"click_in": [REGEX, dx, dy], "clicks": n}``: click (n times, default once) at (dx, dy)
      inside that window's client area.
    A policy is ``(messages, info) -> reply``; after the script it replies DONE.
    """

    def __init__(self, steps: Sequence[Any], max_waits: int = 30) -> None:
        self.steps = list(steps)
        self.max_waits = max_waits
        self._i = 0
        self._waits = 0

    def __call__(self, messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        windows = info.get("windows") or []
        while self._i < len(self.steps):
            step = self.steps[self._i]
            if isinstance(step, str):
                self._i += 1
                return step
            if "wait_window" in step:
                found = any(re.search(step["wait_window"], w.get("title", "")) for w in windows)
                if not found and self._waits < self.max_waits:
                    self._waits += 1
                    return "WAIT"
                self._i, self._waits = self._i + 1, 0
                continue
            if "click_in" in step:
                pattern, dx, dy = step["click_in"]
                self._i += 1
                for w in windows:
                    if re.search(pattern, w.get("title", "")):
                        return (
                            f"pyautogui.click({w['x'] + dx}, {w['y'] + dy}, clicks={step.get('clicks', 1)})"
                        )
                return "FAIL"  # the window the script needs is not there
            raise ValueError(f"unknown gold step {step!r}")
        return "DONE"


def desktop_mini_gold(task: Task) -> ScriptedDesktopPolicy:
    """The scripted solution of a desktop-mini task (a fresh policy per episode)."""
    return ScriptedDesktopPolicy(_gold_steps(task.id))


def desktop_mini_empty(task: Task) -> Any:
    """Gives up at once: claims to be done without touching anything (must score 0)."""
    return lambda messages, info: "DONE"
