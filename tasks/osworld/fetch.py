"""Fill the cache that OSWorld tasks' `download` steps and `cloud_file` getters read, on a host with network.

    python -m arborl.tasks.osworld.fetch evaluation_examples/examples/os [--cache DIR]

Desktop sandboxes have no network, so a `download` step copies its file from a local cache
(`arborl.tasks.osworld.cache`: OSWorld's own layout, `<root>/<task id>/<uuid5(URL)>_<file
name>`). This reads task JSON files (files or folders, as they are, without loading them) and
fetches every `download` URL of their `config` and `evaluator.postconfig`, and every file of
their `cloud_file` getters (the gold files metrics compare against, cached as OSWorld's getter
keeps them: `<root>/<task id>/<dest>`), that is not cached yet. The default cache is `$ARBORL_OSWORLD_CACHE`, else `~/.cache/arborl/osworld`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .cache import cached_cloud_file, cached_download, default_download_cache, getter_files


def download_files(task: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(url, path) of every file the task's `download` steps fetch (setup and postconfig)."""
    evaluator = task.get("evaluator") or {}
    for step in [*(task.get("config") or ()), *(evaluator.get("postconfig") or ())]:
        if isinstance(step, dict) and step.get("type") == "download":
            for f in (step.get("parameters") or {}).get("files") or ():
                yield str(f["url"]), str(f["path"])


def cache_targets(task: dict[str, Any], root: Path) -> Iterator[tuple[str, Path]]:
    """(url, cache path) of every file the task fetches: its `download` steps' and its
    `cloud_file` getters'."""
    for url, path in download_files(task):
        yield url, cached_download(root, str(task["id"]), url, path)
    evaluator = task.get("evaluator") or {}
    for key in ("result", "expected"):
        getters = evaluator.get(key)
        for g in getters if isinstance(getters, list) else [getters]:
            if isinstance(g, dict) and g.get("type") == "cloud_file":
                for url, dest in getter_files(g):
                    yield url, cached_cloud_file(root, str(task["id"]), dest)


def task_files(sources: Iterable[str | Path]) -> list[Path]:
    """The task JSON files named, or found under the folders named."""
    out: list[Path] = []
    for s in map(Path, sources):
        out.extend(sorted(s.rglob("*.json")) if s.is_dir() else [s])
    return out


def fetch(
    sources: Iterable[str | Path], cache: str | Path | None = None, timeout: float = 60.0
) -> dict[str, int]:
    """Fetch what is missing; returns counts: `fetched`, `cached` (already there), `failed`."""
    root = Path(cache) if cache else default_download_cache()
    counts = {"fetched": 0, "cached": 0, "failed": 0}
    for path in task_files(sources):
        try:
            task = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue  # not a task file (e.g. a test_all.json index is a dict of lists: no downloads)
        if not isinstance(task, dict) or "id" not in task:
            continue
        for url, target in cache_targets(task, root):
            if target.is_file():
                counts["cached"] += 1
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".part")
            try:
                with urllib.request.urlopen(url, timeout=timeout) as r, partial.open("wb") as out:
                    shutil.copyfileobj(r, out)
                partial.replace(target)
                counts["fetched"] += 1
            except OSError as e:  # URLError and HTTPError are OSErrors
                partial.unlink(missing_ok=True)
                print(f"{task['id']}: {url}: {e}", file=sys.stderr)
                counts["failed"] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m arborl.tasks.osworld.fetch", description=__doc__.split("\n")[0]
    )
    parser.add_argument("sources", nargs="+", help="OSWorld task JSON files or folders")
    parser.add_argument(
        "--cache", default=None, help="cache root (default: $ARBORL_OSWORLD_CACHE or ~/.cache/arborl/osworld)"
    )
    args = parser.parse_args(argv)
    counts = fetch(args.sources, args.cache)
    print(", ".join(f"{k} {v}" for k, v in counts.items()))
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
