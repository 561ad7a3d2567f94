"""The learning benchmark's run records: seeds add up across sessions whose machines do not
keep `--out`, so a record must carry what the table reads, and runs from another warm start
must not be pooled with the recorded ones."""

from __future__ import annotations

import argparse
import asyncio
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
                "actor/updates": 2.0 if i % 3 else 1.0,  # a group dropped: one mini-batch
                "bench/optimizer_steps": float(sum(2 if j % 3 else 1 for j in range(1, i + 1))),
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
    assert stats["updates"] == 2 + 2 + 1 + 2 + 2 + 1 and stats["stopped"] == 0.0  # optimizer steps
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
    # each run logged entropies 1, 1/2, 1/3: first and last five steps are all three
    assert "| 0.61 → 0.61 (highest 0.61) |" in table
    assert (tmp_path / "docs" / "trainer-learning-modes-t.png").stat().st_size > 0


def test_a_record_from_before_optimizer_steps_loads_and_the_table_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records kept before the optimizer steps were (metrics without them, or numbers only) still
    load; the optimizer-steps column shows a dash for them, the count for the others, and a
    run the entropy guard stopped is marked."""
    monkeypatch.setattr(bl, "RESULTS", tmp_path / "results")
    old = tmp_path / "grpo-0.json"
    kept = {"steps": 30, "tokens": 2e5, "tokens_per_traj": 236, "uniform": 0.0, "clip": 0.0}
    kept |= {"anchor_shared": 0.98, "anchor_size": 8.43, "seconds": 1569, "reward_first": 0.29}
    kept |= {"reward_last": 1.94, "to90": float("nan")}  # bench/results/learning-sokoban-runs/grpo-0
    old.write_text(json.dumps({"after": 0.25, "events": [], "stats": kept}))
    run_dir = tmp_path / "gigpo-0"
    _run(run_dir, [0.1, 0.2, 0.3], [0.0, 0.5, 1.0])
    log = MetricsLogger(run_dir)
    log.log("stopped", 3, {"reason": "the policy's entropy exploded"})
    log.close()
    bl.save_record(tmp_path / "gigpo-0.json", run_dir, 0.5)
    loaded = {name: bl.load_record(tmp_path / f"{name}-0.json") for name in ("grpo", "gigpo")}
    assert "updates" not in loaded["grpo"][2] and loaded["gigpo"][2]["updates"] == 5.0
    assert loaded["gigpo"][2]["stopped"] == 1.0
    args = argparse.Namespace(
        tag="t", suite="tool-maze", train="x:y", train_options={}, max_turns=5, max_new_tokens=48,
        context="truncate", max_context_tokens=1024, init="warm", gigpo_options={}, tree_options={},
        lr=1e-4, temperature=0.6, steps=3, max_steps_factor=3.0, eval_size=8, samples=2, seeds=1,
        kl_coef=0.0, entropy_coeff=0.0, kl_type="low_var_kl", task_streams=bl.PER_SEED,
    )  # fmt: skip
    after = {name: [rec[0]] for name, rec in loaded.items()}
    stats = {name: [rec[2]] for name, rec in loaded.items()}
    bl.write_table(args, ["grpo", "gigpo"], 0.1, after, stats, None, "python x")
    table = (tmp_path / "results" / "learning-t.md").read_text()
    assert "| RL steps | optimizer steps |" in table
    assert "| 30 | — | 200.0k |" in table  # the old record: steps kept, optimizer steps unknown
    assert "| 50%† |" in table and "| 3 | 5 |" in table
    assert "token entropy (nats), first → last 5 steps" in table
    assert "| — |" in table  # the old record logged no entropy; the gigpo run's is shown alone
    assert "each seed its own stream" in table


def _bench_args(**over: object) -> argparse.Namespace:
    args = argparse.Namespace(
        train="arborl.tasks.toy.tool_maze:generate_maze_tasks", train_options={}, suite="tool-maze",
        env_id=None, max_turns=5, max_new_tokens=48, max_context_tokens=1024, context="truncate",
        temperature=0.6, lr=1e-4, checkpoint_every=5, model="small", tokenizer_text=None,
        gigpo_options={}, tree_options={}, steps=10, max_steps_factor=3.0, kl_coef=0.0,
        kl_type="low_var_kl", entropy_coeff=0.0, task_streams=bl.PER_SEED,
    )  # fmt: skip
    for k, v in over.items():
        setattr(args, k, v)
    return args


def test_each_seed_draws_its_own_task_stream_and_its_modes_share_it(tmp_path: Path) -> None:
    args = _bench_args()
    cfgs = {
        (m, s): bl.run_config(args, tmp_path / f"{m}-{s}", "warm", m, s) for m in bl.MODES for s in range(3)
    }
    for s in range(3):
        assert {cfgs[m, s].tasks.seed for m in bl.MODES} == {s}  # paired: one stream per seed
        assert {cfgs[m, s].run.seed for m in bl.MODES} == {s}
    assert len({cfgs["grpo", s].tasks.seed for s in range(3)}) == 3
    assert all(c.tasks.eval_suite == "tool-maze" for c in cfgs.values())  # the held-out tasks: fixed
    # a benchmark recorded before: one stream for every seed, so its seeds stay comparable
    legacy = _bench_args(task_streams="shared")
    assert {bl.run_config(legacy, tmp_path / "g", "warm", "grpo", s).tasks.seed for s in range(3)} == {0}


def test_the_kl_and_entropy_flags_reach_the_learner(tmp_path: Path) -> None:
    off = bl.run_config(_bench_args(), tmp_path / "a", "warm", "grpo", 0).learner
    assert not off.use_kl_loss and off.entropy_coeff == 0.0
    on = bl.run_config(
        _bench_args(kl_coef=0.01, kl_type="k3", entropy_coeff=0.002), tmp_path / "b", "warm", "tree+tree", 1
    ).learner
    assert (
        on.use_kl_loss and on.kl_loss_coef == 0.01 and on.kl_loss_type == "k3" and on.entropy_coeff == 0.002
    )
    assert off.warmup_steps == 0
    warm = bl.run_config(_bench_args(warmup_steps=10), tmp_path / "c", "warm", "gigpo", 2).learner
    assert warm.warmup_steps == 10 and warm.lr == 1e-4  # the rate it rises to is --lr's
    text = bl.stability_text(_bench_args(kl_coef=0.01, warmup_steps=10))
    assert "KL to the warm start 0.01 (low_var_kl)" in text and "first 10 optimizer steps" in text


def test_a_token_budget_run_counts_its_optimizer_steps(tmp_path: Path) -> None:
    """Two RL steps of two mini-batches each (one group a mini-batch): 4 optimizer steps, as
    the learner counts them and as `actor/updates` adds up."""
    from arith_suite import train_config

    cfg = train_config(
        tmp_path / "run",
        sft={"steps": 0},
        run={"steps": 2},
        learner={"ppo_mini_batch_size": 1},
        algorithm={"drop_uniform_groups": False},  # the tiny model scores 0: keep its groups
        **{"async": {"mode": "sync"}},
    )
    asyncio.run(bl.TokenBudgetTrainer(cfg, None).run())
    events = read_metrics(tmp_path / "run")
    rl = [e for e in events if e["phase"] == "rl"]
    assert [e["bench/optimizer_steps"] for e in rl] == [2.0, 4.0]
    assert bl.run_stats(events)["updates"] == sum(e["actor/updates"] for e in rl) == 4.0
