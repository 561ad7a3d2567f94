"""What a client of `arborl envs serve` may ask for: a task id of the served suite, a seed.

A task is code and host paths (a tool's `handler` runs on the host, a `repo_path` is read
from it, a verifier is a function), so a client names tasks, never sends them: the tasks
come from the suite the operator named on the command line, registered or a file, exactly
as `arborl eval suite=` takes it (`tasks/user_suites.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from arborl.tasks import Suite, Task, get_suite, is_registered
from arborl.tasks.user_suites import looks_like_path, suite_from_path

RESET_ARGS = ("task", "seed", "episode_id")


class TaskRefused(ValueError):
    """A reset asked for something the server does not serve; the message says what to send."""


def resolve_suite(
    name: str,
    *,
    repos_dirs: Sequence[str | Path] = (),
    environments: str | None = None,
    split: str | None = None,
) -> Suite:
    """The registered suite `name`, or one made from the file or directory it names (the same
    rule as `arborl eval suite=`; `repos_dirs`, `environments`, `split` are its `swe.*`)."""
    if not is_registered(name) and looks_like_path(name):
        from .desktop.support import DESKTOP  # the desktop's, for OSWorld files only

        return suite_from_path(
            name, repos_dirs=repos_dirs, environments=environments, split=split, desktop=DESKTOP
        )
    return get_suite(name)


class ServedTasks:
    """The tasks one server runs: its suite's, loaded once at start (a bad suite fails there,
    not at a client's first reset), or, without a suite, only the env's own default task."""

    def __init__(self, suite: Suite | None = None) -> None:
        self.suite = suite
        self._by_id: dict[str, Task] = {t.id: t for t in suite.tasks()} if suite is not None else {}

    def __len__(self) -> int:
        return len(self._by_id)

    def _example(self) -> str:
        return repr(next(iter(self._by_id), "TASK_ID"))

    def pick(self, task: Any) -> Task | None:
        """The task a reset's `task` names (None: the suite's first, or the env's default)."""
        if task is None:
            return next(iter(self._by_id.values()), None)
        if not isinstance(task, str):
            raise TaskRefused(
                f"`task` must be a task id (a string such as {self._example()}), not a {type(task).__name__}: "
                "this server runs only the tasks its operator serves (arborl envs serve --suite), "
                "so a client cannot send a task, a tool handler, a module or a host path"
            )
        if self.suite is None:
            raise TaskRefused(
                f"this server serves no suite, so it has no task {task!r}: reset without `task` "
                "(the env's own task), or ask its operator to start it with --suite"
            )
        if task not in self._by_id:
            raise TaskRefused(
                f"suite {self.suite.name!r} has no task {task!r}; its ids look like {self._example()}"
            )
        return self._by_id[task]

    def check_reset(self, seed: Any, episode_id: Any, extra: Mapping[str, Any]) -> None:
        """Refuse reset arguments other than a task id, a seed and an episode id."""
        if extra:
            raise TaskRefused(
                f"reset takes only task (a task id of the served suite, e.g. {self._example()}), seed "
                f"(an int) and episode_id; it got {', '.join(sorted(map(str, extra)))}"
            )
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise TaskRefused(f"seed must be a non-negative int, not {seed!r}")
        if episode_id is not None and not isinstance(episode_id, str):
            raise TaskRefused(f"episode_id must be a string, not {type(episode_id).__name__}")
