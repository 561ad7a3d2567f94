"""A user's list of ScienceWorld variations as a suite (`arborl eval suite=LIST.txt`).

The format: one variation a line, the package's task name and the variation index,
separated by a comma or spaces (a CSV with a `task_name,variation` header reads the same);
blank lines and lines starting with ``#`` are passed over:

    # task_name, variation
    boil, 21
    find-living-thing, 225

Every name must be one of the package's 30 task types and every index within that type's
variations (`variations()`, read from the installed package's own lists; the split a
variation belongs to is recorded). Each variation runs as the `scienceworld-*` suites' do:
its step limit, the gold policy replaying the package's gold action sequence, the empty one
doing nothing; the suite's turn budget is the most any of its variations needs
(`task.turn_budget`).
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

from ..suites import Suite, SuiteError
from .task import ScienceWorldTask, make_task, turn_budget
from .variations import SPLITS, variations

LINE = re.compile(r"^\s*([A-Za-z][\w-]*)\s*(?:,\s*|\s+)(\d+)\s*$")
HEADER = re.compile(r"^\s*task(?:_name)?\s*[,\s]\s*variation\s*$", re.I)


def _entries(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines that are not blank, comments or a header."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    return [(n, line) for n, line in lines if not line.lstrip().startswith("#") and not HEADER.match(line)]


def looks_like_list(text: str) -> bool:
    """Whether `text` reads as a variation list: its first entry is `name, number`."""
    entries = _entries(text)
    return bool(entries) and LINE.match(entries[0][1]) is not None


def read_list(path: Path) -> list[ScienceWorldTask]:
    """The tasks of the list (SuiteError names the first bad line and what is wrong)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SuiteError(f"{path}: cannot read a ScienceWorld list: {e}") from None
    known = variations()
    tasks: list[ScienceWorldTask] = []
    seen: dict[tuple[str, int], int] = {}
    for number, line in _entries(text):
        where = f"{path}:{number}"
        m = LINE.match(line)
        if m is None:
            raise SuiteError(f"{where}: {line.strip()!r} is not `task_name, variation`")
        name, index = m.group(1), int(m.group(2))
        if name not in known:
            raise SuiteError(
                f"{where}: unknown ScienceWorld task {name!r}; the package's tasks are {', '.join(sorted(known))}"
            )
        top = known[name]["max_variations"]
        if index >= top:
            raise SuiteError(f"{where}: {name} has variations 0..{top - 1}, not {index}")
        if (name, index) in seen:
            raise SuiteError(f"{where}: {name} {index} again (first on line {seen[name, index]})")
        seen[name, index] = number
        split = next((s for s in SPLITS if index in known[name][s]), None)
        task = make_task(name, index, split)
        tasks.append(
            task.model_copy(update={"metadata": {**task.metadata, "suite": str(path), "line": number}})
        )
    if not tasks:
        raise SuiteError(f"{path}: no `task_name, variation` line in it")
    return tasks


def scienceworld_suite(name: str, path: Path) -> Suite:
    """The suite of the variations listed in `path` (read and checked now)."""
    tasks = read_list(path)
    return Suite(
        name,
        "arborl/ScienceWorld-v0",
        partial(list, tasks),
        description=f"ScienceWorld variations listed in {path}",
        gold="arborl.tasks.scienceworld.gold:gold_policy",
        empty="arborl.tasks.scienceworld.gold:empty_policy",
        max_turns=max(turn_budget(t.task_name, t.variation) for t in tasks),
        tags=("scienceworld", "multi-turn", "user"),
    )
