"""The training run's live display: one rich progress bar per phase, plus notes.

Where stdout is not a terminal (CI, `| tee`), rich falls back to plain lines, so logs stay
readable.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress


class PhaseBar:
    """A handle on the current phase's bar."""

    def __init__(self, progress: RichProgress, task: int) -> None:
        self._progress, self._task = progress, task

    def advance(self, status: str = "") -> None:
        self._progress.update(self._task, advance=1, status=status)

    def status(self, status: str) -> None:
        self._progress.update(self._task, status=status)

    def total(self, total: int) -> None:
        """The phase's length changed (a time budget shortened it)."""
        self._progress.update(self._task, total=total)


class Progress:
    """Phases (warm start, RL, evaluations) shown as bars with a status line."""

    def __init__(self, console: Console | None = None, enabled: bool = True) -> None:
        self.console = console or Console()
        self.enabled = enabled
        self._active: PhaseBar | None = None

    @contextmanager
    def phase(self, name: str, total: int | None, done: int = 0) -> Iterator[PhaseBar]:
        """A bar for the phase; a phase inside another (an evaluation during RL) only shows
        in the outer bar's status, since one terminal holds one live display."""
        if self._active is not None:
            outer = self._active
            outer.status(name)
            yield outer
            outer.status("")
            return
        columns = [
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
        ]
        with RichProgress(*columns, console=self.console, disable=not self.enabled, transient=False) as bar:
            task = bar.add_task(name, total=total, completed=done, status="")
            self._active = PhaseBar(bar, task)
            try:
                yield self._active
            finally:
                self._active = None

    def note(self, text: str) -> None:
        if self.enabled:
            self.console.print(text)  # rich prints above a live bar
