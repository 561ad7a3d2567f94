"""The learning benchmark's run records: seeds add up across sessions whose machines do not
keep `--out`, so a record must carry what the table reads, and runs from another warm start
must not be pooled with the recorded ones."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from arborl.trainer.local.metrics_log import MetricsLogger, read_metrics

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bench_learning as bl


def _run(run_dir: Path, rewards: list[float], success: list[float]) -> None:
    """A run's metrics as the trainer logs them: the step-0 evaluation, RL steps with keys the
    table does not read, and a branch rolled back by a resume."""
    log = MetricsLogger(run_dir)
    log.log("eval-rl", 0, {"success": 0.1})
    total = 0.0
    for i, (r, s) in enumerate(zip(rewards, success, strict=True), start=1):
        total += 1000 + 10 * i
        log.log(
            "rl",
            i,
            {
                "rollout/reward": r,
                "rollout/success": s,
                "bench/generated_total": total,
                "bench/generated_tokens": 30.0 + i,
                "batch/uniform_group_fraction": 0.25 * (i % 2),
                "anchors/turns_shared": 0.9,
                "anchors/group_size": 4.0 + i,
                "actor/pg_clipfrac": 0.01 * i,
                "actor/entropy": 1.0 / i,
                "perf/unrelated": 123.0,
            },
        )
    log.log("rl", len(rewards) + 1, {"rollout/reward": 99.0, "rollout/success": 1.0})
    log.mark_rolled_back({"rl": len(rewards)})  # the step past the checkpoint
    log.close()


def test_a_record_keeps_what_the_table_reads_and_not_the_rest(tmp_path: Path) -> None:
    run_dir = tmp_path / "grpo-0"
    _run(run_dir, [0.1, 0.5, 0.2, 0.9, 0.3, 0.7], [0.0, 0.25, 0.0, 0.5, 0.25, 0.75])
    record = tmp_path / "records" / "grpo-0.json"
    bl.save_record(record, run_dir, 0.375)
    after, events, stats = bl.load_record(record)
    assert after == 0.375
    assert stats == pytest.approx(bl.run_stats(read_metrics(run_dir)), nan_ok=True)
    assert stats["steps"] == 6 and stats["tokens"] == 6000 + 10 * 21  # the rolled-back step left out
    assert stats["reward_first"] == pytest.approx((0.1 + 0.5 + 0.2 + 0.9 + 0.3) / 5)
    assert all("perf/unrelated" not in e for e in events)
    assert [e["actor/entropy"] for e in events if e["phase"] == "rl"][:2] == [1.0, 0.5]


def test_a_record_kept_without_metrics_gives_its_kept_numbers(tmp_path: Path) -> None:
    record = tmp_path / "grpo-0.json"
    stats = {"steps": 30, "tokens": 226146, "to90": float("nan")}
    record.write_text(json.dumps({"after": 0.25, "events": [], "stats": stats}))
    got = bl.load_record(record)[2]
    assert got["steps"] == 30.0 and got["tokens"] == 226146.0 and got["to90"] != got["to90"]


def test_runs_from_another_warm_start_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bl, "RESULTS", tmp_path)
    assert bl.check_start("t", "abc", None) is None  # nothing recorded yet
    start = bl.records_dir("t") / "start.json"
    start.parent.mkdir()
    start.write_text(json.dumps({"before": 0.25, "digest": "abc", "command": "x"}))
    assert bl.check_start("t", "abc", None) == 0.25
    with pytest.raises(SystemExit, match="another warm start"):
        bl.check_start("t", "abd", None)
    # records from before digests: the warm start's sampled held-out success decides
    start.write_text(json.dumps({"before": 0.25, "digest": None, "command": "x"}))
    assert bl.check_start("t", "abd", None) is None
    assert bl.check_start("t", "abd", 0.25) == 0.25
    with pytest.raises(SystemExit, match="another warm start"):
        bl.check_start("t", "abd", 0.2421875)


def test_the_digest_is_the_weights(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 64)
    (tmp_path / "config.json").write_text("{}")
    first = bl.model_digest(str(tmp_path))
    (tmp_path / "config.json").write_text('{"name": "renamed"}')
    assert bl.model_digest(str(tmp_path)) == first
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 63 + b"\x01")
    assert bl.model_digest(str(tmp_path)) != first


def test_the_report_pairs_the_recorded_seeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bl, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(bl, "DOCS", tmp_path / "docs")
    (tmp_path / "docs").mkdir()
    records = bl.records_dir("t")
    records.mkdir(parents=True)
    (records / "start.json").write_text(json.dumps({"before": 0.1, "digest": "abc", "command": "python x"}))
    afters = {"grpo": [0.25, 0.5, 0.125], "gigpo": [0.5, 0.5, 0.25]}
    for name, values in afters.items():
        for seed, a in enumerate(values):
            run_dir = tmp_path / "runs" / f"{name}-{seed}"
            _run(run_dir, [0.1, 0.2, 0.3], [0.0, 0.5, 1.0])
            bl.save_record(records / f"{name}-{seed}.json", run_dir, a)
    # a fourth seed of GRPO alone: the report takes the seeds every mode completed
    _run(tmp_path / "runs" / "grpo-3", [0.1], [0.0])
    bl.save_record(records / "grpo-3.json", tmp_path / "runs" / "grpo-3", 1.0)
    monkeypatch.setattr(
        sys,
        "argv",
        ["bench_learning.py", "--report", "--suite", "tool-maze", "--tag", "t", "--modes", "grpo,gigpo"],
    )
    bl.main()
    table = (tmp_path / "results" / "learning-t.md").read_text()
    assert "`python x`" in table
    diffs = [0.25, 0.0, 0.125]  # gigpo - grpo, seed by seed
    mean = sum(diffs) / 3
    half = 4.303 * (sum((d - mean) ** 2 for d in diffs) / 2) ** 0.5 / 3**0.5  # t(0.975, 2 df)
    assert f"+{mean:.1%} ({mean - half:+.1%} to {mean + half:+.1%})" in table
    assert "| grpo | 3 | 10.0% → **29.2%** |" in table
    assert (tmp_path / "docs" / "trainer-learning-modes-t.png").stat().st_size > 0
