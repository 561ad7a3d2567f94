"""Where the files of OSWorld's `download` steps and `cloud_file` getters are cached.

The sandbox has no network, so a `download` step copies the file from a local cache, laid
out as OSWorld's own (`<root>/<task id>/<uuid5(URL)>_<file name>`, its SetupController's
names): OSWorld's `cache/` directory works as it is, and
`python -m arborl.tasks.osworld.fetch TASKS` fills one on a host with network.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
