"""What the desktop env can run: its capability tables, and the checks the OSWorld loader
asks of it (`arborl.tasks.osworld.DesktopSupport`).

    load_osworld_task("task.json", support=DESKTOP)   # refuses what this env cannot run, saying why

The step, getter and metric names here are exactly the ones `steps.py`, `evaluators.py` and
`osworld_metrics.py` implement (tests/envs/desktop checks both sides name the same set);
adding one to the env means adding it here, beside it. What the image lacks (`MISSING_APPS`),
how `open` picks an application (`OPEN_WITH`), which pyautogui calls a setup command may make
(the env replays them with xdotool) and which `compare_table` rules `office_metrics.py`
implements (`table_rules.py`) are the image's and the env's too.
"""

from __future__ import annotations

import ast
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from arborl.tasks.osworld import OSWorldGetter, UnsupportedOSWorldFeature

from ..benchmarks import Benchmark
from .table_rules import table_rules_problem

# name -> (required parameters, optional parameters)
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
#: `method`s of check_json rules (OSWorld's `_match_value_to_rule`, `osworld_metrics.match_value_to_rule`).
RULE_METHODS = ("re", "eq", "ne", "lt", "le", "gt", "ge", "approx", "str_list_eq")

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


class DesktopEnvSupport:
    """The desktop env's answers to the loader (`arborl.tasks.osworld.DesktopSupport`)."""

    def check_step(self, kind: str, parameters: Mapping[str, Any]) -> None:
        _check_params("setup step", kind, parameters, SETUP_STEPS, UNSUPPORTED_STEPS)
        if kind in ("launch", "execute", "command"):
            _check_command(kind, parameters["command"])
        elif kind == "open":
            open_with(parameters["path"])

    def check_getter(self, kind: str, parameters: Mapping[str, Any]) -> None:
        _check_params("getter", kind, parameters, GETTERS, UNSUPPORTED_GETTERS)

    def check_metric(self, name: str) -> None:
        if name not in METRICS:
            raise UnsupportedOSWorldFeature(
                f"metric {name!r} is not supported by the desktop env; supported: {', '.join(METRICS)}"
            )

    def check_metric_use(self, name: str, options: Mapping[str, Any], expected: OSWorldGetter | None) -> None:
        extra = set(options) - METRICS[name]
        if extra:
            raise UnsupportedOSWorldFeature(
                f"metric {name!r} does not support option(s) {sorted(extra)}; "
                f"it takes {sorted(METRICS[name]) or 'none'}"
            )
        if name == "check_json":
            _check_rule_methods(expected)
        if name == "compare_table" and (problem := table_rules_problem(options, RULE_METHODS)):
            raise UnsupportedOSWorldFeature(problem)
        if name == "check_accessibility_tree":
            _check_tree_rules(expected)


#: The desktop env's support: pass it to the OSWorld loader (`support=DESKTOP`).
DESKTOP = DesktopEnvSupport()


class OSWorldBenchmark(Benchmark):
    """OSWorld tasks on `arborl/Desktop-v0`: graded by the env (its evaluator runs OSWorld's
    metrics as the episode ends); a user's task JSONs are read knowing what this desktop can
    run, so a task it cannot is refused as the suite loads, saying why."""

    name = "osworld"

    def reader_options(self, options: Any = None) -> dict[str, Any]:
        return {"desktop": DESKTOP}


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
