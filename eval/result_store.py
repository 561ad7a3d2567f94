"""Evaluation results in SQLite, one row per (run, instance, sample): what makes runs resumable.

    store = ResultStore(run_dir / "results.sqlite", run_id="swe-mini-gold")
    store.open_run(suite="swe-mini", agent="gold", config={...})   # refuses a different run's dir
    store.finished()          # {(instance_id, sample), ...}: skipped when the run is resumed
    store.put(result)         # committed at once (WAL), so a killed run loses only what was in flight

A row is final once written: re-running the same command skips it. Infrastructure failures
that used up their retries are stored with status `infra_error` and are *not* final: a
resumed run tries them again. Every row, final or not, counts in the run's headline (an
error is an unresolved sample: `summary.py`).
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
#: Statuses that are final (kept on resume); `infra_error` and `env_error` (the instance's
#: environment is broken: its gold patch does not resolve, a setup step failed) are tried
#: again when the run is resumed. Until then they count as unresolved, like every error.
FINAL = ("done", "error", "timeout", "agent_crash")
STATUSES = (*FINAL, "infra_error", "env_error")


@dataclass
class InstanceResult:
    """The outcome of one sample of one instance."""

    instance_id: str
    sample: int
    status: str
    """done (graded), error (the env, grader or policy factory raised), timeout, agent_crash (the
    agent's own actions killed its sandbox: a failure, never retried), infra_error (the sandbox
    layer failed, retries used up), env_error (the task's environment is broken, not the
    agent). All but done are unresolved."""
    success: bool = False
    score: float = 0.0
    grade: str = ""
    """The benchmark's verdict word (`Grade.label`); '' where it has none."""
    turns: int = 0
    prompt_tokens: int = 0
    response_tokens: int = 0
    tokens_exact: bool = False
    """True when counted by the model's tokenizer (model agent); else ~4 characters per token."""
    tool_calls: int = 0
    tool_errors: int = 0
    wall_s: float = 0.0
    attempts: int = 1
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    finished_at: float = field(default_factory=time.time)


class RunMismatch(ValueError):
    """The run directory holds another run (a different suite or agent)."""


_COLUMNS = [f for f in InstanceResult.__dataclass_fields__ if f != "details"]


class ResultStore:
    """One SQLite file per run directory; rows keyed by (run_id, instance_id, sample)."""

    def __init__(self, path: str | Path, run_id: str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        self.db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(
            """
            CREATE TABLE IF NOT EXISTS runs (
                run_id TEXT PRIMARY KEY, suite TEXT NOT NULL, agent TEXT NOT NULL,
                config TEXT NOT NULL, schema INTEGER NOT NULL, created REAL NOT NULL, updated REAL NOT NULL);
            CREATE TABLE IF NOT EXISTS results (
                run_id TEXT NOT NULL, instance_id TEXT NOT NULL, sample INTEGER NOT NULL,
                status TEXT NOT NULL, success INTEGER NOT NULL, score REAL NOT NULL, grade TEXT NOT NULL,
                turns INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL, response_tokens INTEGER NOT NULL,
                tokens_exact INTEGER NOT NULL, tool_calls INTEGER NOT NULL, tool_errors INTEGER NOT NULL,
                wall_s REAL NOT NULL, attempts INTEGER NOT NULL, error TEXT, details TEXT NOT NULL,
                finished_at REAL NOT NULL,
                PRIMARY KEY (run_id, instance_id, sample));
            """
        )

    def open_run(self, suite: str, agent: str, config: dict[str, Any]) -> bool:
        """Record the run (or check it is the same run); True when it already existed."""
        row = self.db.execute("SELECT suite, agent FROM runs WHERE run_id = ?", (self.run_id,)).fetchone()
        now = time.time()
        if row is None:
            self.db.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
                (self.run_id, suite, agent, json.dumps(config, default=str), SCHEMA_VERSION, now, now),
            )
            return False
        if tuple(row) != (suite, agent):
            raise RunMismatch(
                f"{self.path.parent} holds run {self.run_id!r} of suite {row[0]!r} with agent {row[1]!r}, "
                f"not {suite!r} with {agent!r}: pick another run.dir"
            )
        self.db.execute(
            "UPDATE runs SET updated = ?, config = ? WHERE run_id = ?",
            (now, json.dumps(config, default=str), self.run_id),
        )
        return True

    def run_info(self) -> dict[str, Any]:
        row = self.db.execute(
            "SELECT suite, agent, config, created, updated FROM runs WHERE run_id = ?", (self.run_id,)
        ).fetchone()
        if row is None:
            return {}
        return {
            "run_id": self.run_id,
            "suite": row[0],
            "agent": row[1],
            "config": json.loads(row[2]),
            "created": row[3],
            "updated": row[4],
        }

    def finished(self) -> set[tuple[str, int]]:
        """(instance_id, sample) of every final result."""
        marks = ",".join("?" * len(FINAL))
        rows = self.db.execute(
            f"SELECT instance_id, sample FROM results WHERE run_id = ? AND status IN ({marks})",
            (self.run_id, *FINAL),
        )
        return {(r[0], int(r[1])) for r in rows}

    def put(self, result: InstanceResult) -> None:
        """Insert or replace the row of (instance, sample); committed when this returns."""
        if result.status not in STATUSES:
            raise ValueError(f"unknown status {result.status!r}; one of {STATUSES}")
        values = asdict(result)
        row = [values[c] for c in _COLUMNS]
        cols = ", ".join(["run_id", *_COLUMNS, "details"])
        self.db.execute(
            f"INSERT OR REPLACE INTO results ({cols}) VALUES ({', '.join('?' * (len(_COLUMNS) + 2))})",
            (self.run_id, *row, json.dumps(values["details"], default=str)),
        )

    def results(self) -> list[InstanceResult]:
        rows = self.db.execute(
            f"SELECT {', '.join(_COLUMNS)}, details FROM results WHERE run_id = ? ORDER BY instance_id, sample",
            (self.run_id,),
        ).fetchall()
        out = []
        for row in rows:
            values = dict(zip(_COLUMNS, row[:-1], strict=True))
            for flag in ("success", "tokens_exact"):
                values[flag] = bool(values[flag])
            out.append(InstanceResult(**values, details=json.loads(row[-1])))
        return out

    def close(self) -> None:
        self.db.close()


def read_results(run_dir: str | Path) -> tuple[dict[str, Any], list[InstanceResult]]:
    """(run info, results) of the run stored in `run_dir` (its only run)."""
    path = Path(run_dir) / "results.sqlite"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} has no results.sqlite: not an evaluation run directory")
    db = sqlite3.connect(path)
    try:
        ids = [r[0] for r in db.execute("SELECT run_id FROM runs ORDER BY created")]
    finally:
        db.close()
    if not ids:
        raise FileNotFoundError(f"{path} holds no run")
    store = ResultStore(path, ids[0])
    try:
        return store.run_info(), store.results()
    finally:
        store.close()
