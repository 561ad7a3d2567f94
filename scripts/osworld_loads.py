"""Which OSWorld task JSONs load in the desktop env, and why the others are refused.

    python scripts/osworld_loads.py OSWorld/evaluation_examples/examples/multi_apps \
        [--index OSWorld/evaluation_examples/test_all.json --domain multi_apps] [--assume-cached]

Loads each task as it is (`load_osworld_task`, with the desktop env's `support`) and prints
the ids that load and, for the rest, a count of their first refusal reason. `--index`/`--domain`
restrict to the tasks a test index lists (OSWorld's `test_all.json`). `--assume-cached` puts a placeholder for every file the tasks'
`download` steps and `cloud_file` getters fetch into a temporary download cache, to count what
would load once `python -m arborl.tasks.osworld.fetch` has filled the cache on a host with
network (what loads is not what runs: the files' contents are not checked).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

from arborl.envs.desktop.support import DESKTOP
from arborl.tasks.osworld import load_osworld_task
from arborl.tasks.osworld.fetch import cache_targets

#: (pattern on one refusal clause, the category it counts under)
CATEGORIES = [
    (r"launch: '([^']+)' is not installed", r"launch \1 (not in the image)"),
    (r"setup step '([^']+)' is not supported", r"setup step \1"),
    (r"getter '([^']+)' is not supported", r"getter \1"),
    (r"metric '([^']+)' is not supported", r"metric \1"),
    (r"open: no application for '([^']+)'", r"open of \1 files"),
    (r"download: .* is not in the download cache", "download not in the cache"),
    (r"cloud_file: .* is not in the download cache", "cloud_file not in the cache"),
    (r"needs the agent to be root", "needs the agent to be root"),
    (r"runs as root after the agent has acted", "a root step on the agent's files after it acted"),
]


def category(message: str) -> str:
    """The first refusal clause of a load error, as a category name."""
    first = message.split("; ")[0]
    for pattern, name in CATEGORIES:
        m = re.search(pattern, first)
        if m:
            return m.expand(name)
    return re.sub(r"^[^:]+: (config|evaluator)[^:]*: ", "", first)[:100]


def is_task_file(path: Path) -> bool:
    """A task JSON (not an index such as test_all.json, nor other JSON beside the tasks)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "id" in data and "evaluator" in data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="a folder of OSWorld task JSONs")
    parser.add_argument("--index", type=Path, help="a test index (test_all.json)")
    parser.add_argument("--domain", help="the index's domain (e.g. multi_apps)")
    parser.add_argument("--assume-cached", action="store_true", help="placeholders for every download")
    args = parser.parse_args(argv)

    files = [f for f in sorted(args.folder.glob("*.json")) if is_task_file(f)]
    if args.index:
        wanted = set(json.loads(args.index.read_text())[args.domain])
        files = [f for f in files if f.stem in wanted]
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        if args.assume_cached:
            for f in files:
                task = json.loads(f.read_text())
                for _, target in cache_targets(task, cache):
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(b"")
        loaded, refused = [], Counter()
        for f in files:
            try:
                load_osworld_task(f, support=DESKTOP, download_cache=cache)
                loaded.append(f.stem)
            except ValueError as e:
                refused[category(str(e))] += 1
    print(
        f"{len(loaded)} of {len(files)} load"
        + (" (download cache assumed full)" if args.assume_cached else "")
    )
    for task_id in loaded:
        print(f"  loads: {task_id}")
    for name, n in refused.most_common():
        print(f"  {n:3d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
