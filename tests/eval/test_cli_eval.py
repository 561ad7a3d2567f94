"""`arborl eval` as a user runs it: listing, bad input, the tiny model end to end, a run killed
with SIGKILL that resumes, and the comparison report."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import time

import docker
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from arborl.eval.config import EvalConfig
from arborl.eval.runner import run_eval
from arborl.sandboxes.owner import OWNER_PID

CMD = [sys.executable, "-m", "arborl.cli.main"]


def arborl(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=timeout)


def summary(run) -> dict:
    return json.loads((run / "summary.json").read_text())


def test_list_shows_every_registered_suite():
    res = arborl("eval", "--list")
    assert res.returncode == 0, res.stderr
    for name in ("swe-mini", "tool-mini"):
        assert name in res.stdout
    assert "120" in res.stdout  # tool-mini's task count


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("suite=no-such-suite", "unknown suite 'no-such-suite'; known:"),
        ("agent=robot", "invalid eval config"),
        ("samples=0", "invalid eval config"),
        ("tasks=[tool-mini/nope]", "has no tasks"),
    ],
)
def test_bad_input_is_a_clear_error(override, message, tmp_path):
    res = arborl("eval", override, f"run.dir={tmp_path / 'run'}")
    assert res.returncode == 2 and message in res.stdout.replace("\n", " "), res.stdout + res.stderr


@pytest.mark.slow
@pytest.mark.docker
def test_the_tiny_model_runs_both_suites_end_to_end(tiny_model, docker_backend, tmp_path):
    """Any score (an untrained 1M-parameter model), honestly reported; token-exact trajectories."""
    runs = {
        "tool-mini": ["limit=4", "samples=2", "pass_k=[1,2]", "max_turns=2", "model.temperature=1.0"],
        "swe-mini": ["limit=2", "max_turns=2", "concurrency=2"],
    }
    for suite, extra in runs.items():
        run = tmp_path / suite
        res = arborl(
            "eval",
            f"suite={suite}",
            "agent=model",
            f"model.path={tiny_model}",
            "model.max_new_tokens=24",
            "sandbox=docker",
            f"run.dir={run}",
            *extra,
        )
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        s = summary(run)
        assert (
            s["samples"] == (8 if suite == "tool-mini" else 2)
            and s["infra_errors"] == 0
            and s["tokens_exact"]
        )
        assert 0.0 <= s["resolved_rate"] <= 1.0 and f"resolved {s['resolved']}/{s['samples']}" in res.stdout
        traj = next((run / "instances").glob("*/sample-0/trajectory.parquet"))
        table = pq.read_table(traj)
        assert table.num_rows == 1 and len(table.column("prompt_ids")[0]) > 10
        transcript = json.loads((traj.parent / "transcript.json").read_text())
        assert transcript[0]["role"] == "system" and any(m["role"] == "assistant" for m in transcript)
    assert set(summary(tmp_path / "tool-mini")["pass_at_k"]) == {"1", "2"}
    grades = summary(tmp_path / "swe-mini")["grades"]
    assert sum(grades.values()) == 2 and set(grades) <= {"FULL", "PARTIAL", "NO"}


def _rows(db) -> list[tuple[str, int, str]]:
    if not db.exists():
        return []
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return conn.execute("SELECT instance_id, sample, grade FROM results").fetchall()
    except sqlite3.OperationalError:  # the table is not created yet
        return []


@pytest.mark.slow
@pytest.mark.docker
def test_a_killed_run_resumes_without_losing_or_repeating_instances(docker_backend, tmp_path):
    run, n = tmp_path / "run", 6
    args = [
        "eval",
        "suite=swe-mini",
        "agent=gold",
        f"limit={n}",
        "sandbox=docker",
        f"run.dir={run}",
        "report=false",
    ]
    proc = subprocess.Popen(
        [*CMD, *args, "concurrency=1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 300
    while len(_rows(run / "results.sqlite")) < 2 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(_rows(run / "results.sqlite"))
    assert 2 <= done_before < n, "the run was not killed mid-way"
    res = arborl(*args, "concurrency=2")  # settings other than suite and agent may change
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f"resuming: {done_before} finished, {n - done_before} to go" in res.stdout
    rows = _rows(run / "results.sqlite")
    assert len(rows) == n and len({(r[0], r[1]) for r in rows}) == n and {r[2] for r in rows} == {"FULL"}
    assert summary(run)["resolved_rate"] == 1.0
    # the killed harness's sandboxes were reaped when the resumed run's pool started
    left = docker.from_env().containers.list(all=True, filters={"label": f"{OWNER_PID}={proc.pid}"})
    assert left == []


def test_the_report_compares_two_runs(tmp_path):
    for agent in ("gold", "empty"):  # in-process runs: the report is what is under test here
        cfg = EvalConfig(suite="tool-mini", agent=agent, limit=9, run={"dir": str(tmp_path / agent)})
        asyncio.run(run_eval(cfg, console=Console(quiet=True)))
        assert (tmp_path / agent / "report.md").exists() and (tmp_path / agent / "success.png").exists()
    res = arborl(
        "eval-report", str(tmp_path / "gold"), str(tmp_path / "empty"), "--out", str(tmp_path / "cmp")
    )
    assert res.returncode == 0, res.stderr
    md = (tmp_path / "cmp" / "report.md").read_text()
    assert (
        "| gold | tool-mini | gold | 9 | 9 | 9/9 (100.0%)" in md
        and "| empty | tool-mini | empty | 9 | 9 | 0/9 (0.0%)" in md
    )
    for png in ("success.png", "turns.png", "compare.png"):
        assert (tmp_path / "cmp" / png).stat().st_size > 5000
    page = (tmp_path / "cmp" / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3 and "Instances of empty" in page
    assert arborl("eval-report", str(tmp_path / "nothing")).returncode == 2
