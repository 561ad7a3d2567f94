"""Metrics of OSWorld's `os` domain and of its `multi_apps` tasks that need only Debian
packages (its `metrics/basic_os.py`, `general.py` and `gimp.py` names), as pure functions of
what the getters returned. Same contract as `osworld_metrics`: `(result, expected,
**options) -> score in [0, 1]`; `expected` is None where the task gives none.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Mapping
from typing import Any

#: A clock time HH:MM:SS (24-hour), as OSWorld's check_line_number looks for in each line.
_CLOCK = re.compile(r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d")


def check_text_enlarged(result: Any, expected: Any = None) -> float:
    """`gsettings get org.gnome.desktop.interface text-scaling-factor` above 1.0."""
    try:
        return float(float(str(result).strip()) > 1.0)
    except ValueError:
        return 0.0


def is_utc_0(result: Any, expected: Any = None) -> float:
    """`timedatectl` output whose time zone is at offset +0000."""
    for line in str(result or "").splitlines():
        if line.strip().startswith("Time zone:"):
            return float("+0000" in line)
    return 0.0


def check_gnome_favorite_apps(result: Any, rules: Mapping[str, Any]) -> float:
    """`gsettings get org.gnome.shell favorite-apps` (a GVariant string list) holds exactly
    the expected apps, in any order."""
    try:
        apps = ast.literal_eval(str(result).strip().removeprefix("@as "))
    except (ValueError, SyntaxError):
        return 0.0
    expected = list(rules["expected"])
    return float(isinstance(apps, list) and len(apps) == len(expected) and set(apps) == set(expected))


def check_moved_jpgs(result: Any, rules: Mapping[str, Any]) -> float:
    """A `list_directory` tree whose top level holds exactly the expected file names."""
    if not isinstance(result, Mapping):
        return 0.0
    names = [str(c.get("name")) for c in result.get("children") or [] if isinstance(c, Mapping)]
    return float(sorted(names) == sorted(rules["expected"]))


def check_line_number(result: Any, rules: Mapping[str, Any]) -> float:
    """A text file (a `vm_file` path) with exactly `int(rules["expected"])` lines that hold a
    clock time HH:MM:SS, e.g. the sample lines of a `sar 1 30` report (its header line has a
    time too, hence 31). No file, or one that cannot be read, scores 0."""
    if not result or not os.path.isfile(str(result)):
        return 0.0
    try:
        with open(str(result), encoding="utf-8", errors="replace") as f:
            count = sum(1 for line in f if _CLOCK.search(line))
        return float(count == int(rules["expected"]))
    except (OSError, ValueError, TypeError):
        return 0.0


def check_image_file_size(result: Any, rules: Mapping[str, Any]) -> float:
    """A file (a `vm_file` path) smaller than `rules["max_size"]` bytes (strictly)."""
    if not result:
        return 0.0
    try:
        return float(os.path.getsize(str(result)) < rules["max_size"])
    except OSError:
        return 0.0


OS_METRICS = {
    f.__name__: f
    for f in (
        check_text_enlarged,
        is_utc_0,
        check_gnome_favorite_apps,
        check_moved_jpgs,
        check_line_number,
        check_image_file_size,
    )
}
