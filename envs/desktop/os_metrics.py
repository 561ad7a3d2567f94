"""Metrics of OSWorld's `os` domain (its `metrics/basic_os.py` and `general.py` names), as
pure functions of what the getters returned. Same contract as `metrics`: `(result, expected,
**options) -> score in [0, 1]`; `expected` is None where the task gives none.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any


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


OS_METRICS = {
    f.__name__: f for f in (check_text_enlarged, is_utc_0, check_gnome_favorite_apps, check_moved_jpgs)
}
