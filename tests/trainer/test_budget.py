"""The time budget is planned per phase: a slow warm start is shortened so that RL keeps its
share, and the run says what it cut (metrics, summary, stdout)."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

import pytest
from arith_suite import train_config  # also registers the test-arith suite

from arborl.trainer.local.budget import PhaseBudget, steps_that_fit
from arborl.trainer.local.learner import Learner
from arborl.trainer.local.loop import Trainer
from arborl.trainer.local.metrics_log import read_metrics


def test_steps_that_fit_stay_between_the_steps_done_and_the_steps_planned():
    assert steps_that_fit(planned=100, done=5, step_s=1.0, left_s=math.inf) == 100
    assert steps_that_fit(planned=100, done=5, step_s=1.0, left_s=20.5) == 25
    assert steps_that_fit(planned=100, done=5, step_s=1.0, left_s=-3.0) == 5  # never below done
    assert steps_that_fit(planned=100, done=5, step_s=0.01, left_s=60.0) == 100  # never above planned


def test_the_warm_start_leaves_rl_its_share_and_counts_its_evaluations():
    budget = PhaseBudget(budget_s=28 * 60, rl_share=0.25)
    # the slower machine of the issue: 1.25 s a warm-start step, 2 min spent before it
    slow = budget.plan_sft(planned=2000, done=5, step_s=1.25, elapsed_s=120, eval_every=250, eval_s=10)
    assert slow.shortened and 800 < slow.kept < 950
    assert "shortened to" in slow.message() and slow.as_metrics()["budget/sft_kept"] == slow.kept
    # 120 s + kept steps + evaluations fit in 75 % of the budget
    evals = 1 + sum(1 for s in range(6, slow.kept) if s % 250 == 0)
    assert 120 + (slow.kept - 5) * 1.25 + evals * 10 <= 0.75 * 28 * 60
    # this machine (0.54 s a step): the main job's 2000 steps fit
    fast = budget.plan_sft(planned=2000, done=5, step_s=0.45, elapsed_s=100, eval_every=250, eval_s=10)
    assert not fast.shortened and fast.kept == 2000
    rl = budget.plan_rl(planned=200, done=5, step_s=3.0, elapsed_s=23 * 60, eval_every=10, eval_s=10)
    assert rl.shortened and 5 < rl.kept < 100
    assert (
        PhaseBudget(budget_s=None)
        .plan_rl(planned=200, done=5, step_s=9, elapsed_s=1e9, eval_every=10, eval_s=1)
        .kept
        == 200
    )


@pytest.fixture
def slow_warm_start(monkeypatch):
    """Every warm-start step takes at least 0.4 s (a slower CPU)."""
    fast = Learner.sft_update

    def slow(self, *args, **kwargs):
        start = time.perf_counter()
        out = fast(self, *args, **kwargs)
        time.sleep(max(0.0, 0.4 - (time.perf_counter() - start)))
        return out

    monkeypatch.setattr(Learner, "sft_update", slow)


def test_a_slow_warm_start_is_shortened_so_that_rl_runs_and_the_cut_is_recorded(
    tmp_path: Path, slow_warm_start, capsys
):
    # 60 warm-start steps of 0.4 s are 24 s: alone more than the 0.4-minute budget, which
    # before per-phase planning left RL 0 of its steps, silently.
    run = tmp_path / "run"
    cfg = train_config(
        run,
        sft={"steps": 60},
        run={"time_budget_min": 0.4, "rl_share": 0.5},
    )
    summary = asyncio.run(Trainer(cfg).run())
    assert 5 <= summary["sft_steps"] < 60, summary
    assert summary["rl_steps"] >= 1, summary
    cut = summary["budget"]["sft"]
    assert cut["planned"] == 60 and cut["kept"] == summary["sft_steps"] and cut["step_s"] >= 0.35
    budget_events = [e for e in read_metrics(run) if e["phase"] == "budget"]
    assert any(e.get("budget/sft_kept") == summary["sft_steps"] for e in budget_events)
    assert "warm start shortened to" in capsys.readouterr().out
    # the RL phase ends with an evaluation, wherever the budget ended it
    evals = [e["step"] for e in read_metrics(run) if e["phase"] == "eval-rl"]
    assert evals[-1] == summary["rl_steps"]


def test_a_warm_start_that_slows_down_is_planned_again(tmp_path: Path, monkeypatch, capsys):
    # Fast first steps (0.05 s) then 0.4 s ones: planned from the first steps alone, the warm
    # start would take RL's share and more; planned again as it goes, it ends near its own.
    from arborl.trainer.local import loop

    monkeypatch.setattr(loop, "REPLAN_EVERY", 5)
    fast, calls = Learner.sft_update, []

    def slowing(self, *args, **kwargs):
        start = time.perf_counter()
        out = fast(self, *args, **kwargs)
        calls.append(start)
        time.sleep(max(0.0, (0.05 if len(calls) <= 8 else 0.4) - (time.perf_counter() - start)))
        return out

    monkeypatch.setattr(Learner, "sft_update", slowing)
    run = tmp_path / "run"
    cfg = train_config(
        run,
        sft={"steps": 400, "eval_every": None},
        run={"steps": 2, "checkpoint_every": 20, "time_budget_min": 0.5, "rl_share": 0.5},
    )
    trainer = Trainer(cfg)
    summary = asyncio.run(trainer.run())
    plans = [e["budget/sft_kept"] for e in read_metrics(run) if "budget/sft_kept" in e]
    assert len(plans) >= 2 and plans[-1] < plans[0], plans  # the first plan was too long
    assert summary["sft_steps"] == plans[-1] == summary["budget"]["sft"]["kept"]
    # the warm start ended within its 15 s share, give or take a step and the first evaluation
    sft_end = calls[-1] - calls[0]
    assert sft_end < 15 + 2, (sft_end, plans)
