"""The run's trajectory store: every finished group on disk the moment it is complete.

    runs/<run>/trajectories/group-000042.parquet      one file per group (task index 42)

A group is written atomically (temporary file, then rename: `write_trajectories`), so a
killed trainer leaves whole groups or none. On resume, the groups that are on disk but were
not trained on yet go back into the buffer instead of being generated again; the trainer's
checkpoint says which ones were trained on.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from arborl.agents.trajectory import Trajectory, read_trajectories, write_trajectories

_NAME = re.compile(r"^group-(\d+)\.parquet$")


class TrajectoryStore:
    """Groups of trajectories, keyed by the index of the task they came from."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, index: int) -> Path:
        return self.root / f"group-{index:06d}.parquet"

    def put(self, index: int, trajectories: Sequence[Trajectory]) -> Path:
        """Write one group (atomically). Writing an index twice is a bug upstream: refused."""
        path = self.path(index)
        if path.exists():
            raise FileExistsError(f"group {index} is already stored ({path}): it would be a duplicate")
        return write_trajectories(path, trajectories)

    def get(self, index: int) -> list[Trajectory]:
        return read_trajectories(self.path(index))

    def indices(self) -> list[int]:
        """Indices of the stored groups, ascending."""
        return sorted(int(m.group(1)) for p in self.root.iterdir() if (m := _NAME.match(p.name)))

    def __iter__(self) -> Iterator[tuple[int, list[Trajectory]]]:
        for i in self.indices():
            yield i, self.get(i)

    def __len__(self) -> int:
        return len(self.indices())
