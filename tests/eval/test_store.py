"""The SQLite result store: what a resumed run skips, and what it refuses."""

from __future__ import annotations

import pytest

from arborl.eval.result_store import InstanceResult, ResultStore, RunMismatch, read_results


def test_results_are_kept_per_instance_and_sample_and_infra_errors_are_retried(tmp_path):
    store = ResultStore(tmp_path / "results.sqlite", "run-a")
    assert store.open_run("swe-mini", "gold", {"samples": 2}) is False
    store.put(InstanceResult("x", 0, "done", success=True, details={"grade": {"status": "FULL"}}))
    store.put(InstanceResult("x", 1, "timeout"))
    store.put(InstanceResult("y", 0, "infra_error", attempts=3))
    assert store.finished() == {("x", 0), ("x", 1)}
    store.put(InstanceResult("y", 0, "done", attempts=1))  # the resumed run's attempt replaces it
    assert store.finished() == {("x", 0), ("x", 1), ("y", 0)}
    store.close()

    again = ResultStore(tmp_path / "results.sqlite", "run-a")
    assert again.open_run("swe-mini", "gold", {"samples": 2}) is True
    results = again.results()
    assert [(r.instance_id, r.sample, r.status) for r in results] == [
        ("x", 0, "done"),
        ("x", 1, "timeout"),
        ("y", 0, "done"),
    ]
    assert results[0].success is True and results[0].details == {"grade": {"status": "FULL"}}
    with pytest.raises(RunMismatch, match=r"pick another run\.dir"):
        again.open_run("tool-mini", "gold", {})
    with pytest.raises(ValueError, match="unknown status"):
        again.put(InstanceResult("z", 0, "maybe"))
    again.close()
    info, rows = read_results(tmp_path)
    assert info["suite"] == "swe-mini" and info["config"] == {"samples": 2} and len(rows) == 3


def test_reading_a_directory_without_results_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not an evaluation run directory"):
        read_results(tmp_path)
