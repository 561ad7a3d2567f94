"""The time budget is planned per phase: a slow warm start is shortened so that RL keeps its
share, and the run says what it cut (metrics, summary, stdout)."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

import pytest
from arith_suite import train_config  # also registers the test-arith suite

from arborl.trainer.local.budget import Pacer, PhaseBudget, Plan, steps_that_fit
from arborl.trainer.local.learner import Learner
from arborl.trainer.local.metrics_log import read_metrics
from arborl.trainer.local.trainer import Trainer


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


def run_paced(pacer: Pacer, now: list[float], step_s, evaluations=()) -> dict[int, tuple[Plan, float]]:
    """Step a phase under `pacer` on a fake clock: step n takes `step_s(n)` seconds, and an
    evaluation of 4 s follows each step in `evaluations`. The plans taken, by step, with the
    clock when each was made."""
    plans, step = {}, 0
    while step < pacer.target:
        step += 1
        plan = pacer.before(step)
        if plan is not None:
            plans[step] = (plan, now[0])
            if step > pacer.target:
                break
        now[0] += step_s(step)
        if step in evaluations:
            now[0] += 4.0
            pacer.evaluated(4.0)
    return plans


def test_the_pacer_leaves_out_the_first_step_and_the_evaluations_and_plans_again():
    now = [0.0]
    budget = PhaseBudget(budget_s=100.0, rl_share=0.5)  # the warm start may last until 50 s

    def pacer() -> Pacer:
        now[0] = 0.0
        clock = lambda: now[0]  # noqa: E731
        return Pacer(budget, "sft", planned=1000, first=0, eval_every=None, eval_s=2.0, elapsed=clock,
                     replan_every=5, clock=clock)  # fmt: skip

    # a 10 s warm-up step, then 0.1 s steps, then 0.5 s from step 9 on
    slowing = pacer()
    plans = run_paced(slowing, now, lambda n: 10.0 if n == 1 else 0.1 if n <= 8 else 0.5, evaluations={3})
    first, at = plans[6]  # after `probe` (5) steps, timed from the second, the evaluation left out
    assert first.say and first.cut.step_s == pytest.approx(0.1) and at == pytest.approx(14.4)
    # what the arithmetic plans from that pace, with the evaluation's 4 s expected at the end
    assert first.cut == budget.plan_sft(
        planned=1000, done=5, step_s=first.cut.step_s, elapsed_s=at, eval_every=None, eval_s=4.0
    )
    assert 315 <= first.cut.kept <= 325
    assert all(s % 5 == 1 for s in plans) and len(plans) >= 2, plans  # planned again every 5 steps
    assert slowing.target == plans[max(plans)][0].cut.kept < first.cut.kept
    assert now[0] <= 50.0  # the phase kept to its share of the budget

    # the same pace throughout: the plans after the first move nothing, and none is taken
    steady = pacer()
    plans = run_paced(steady, now, lambda n: 10.0 if n == 1 else 0.1, evaluations={3})
    assert list(plans) == [6] and steady.target == plans[6][0].cut.kept


def test_rl_is_planned_once_from_its_own_first_steps_and_stops_with_the_budget():
    now = [100.0]  # the run's seconds before RL
    budget = PhaseBudget(budget_s=160.0)
    clock = lambda: now[0]  # noqa: E731
    pacer = Pacer(budget, "rl", planned=200, first=40, eval_every=20, eval_s=3.0, elapsed=clock, clock=clock)
    plans, step, planned_at = {}, 40, 0.0  # RL resumed at version 40
    while step < pacer.target and not pacer.out_of_time():
        step += 1
        plan = pacer.before(step)
        if plan is not None:
            plans[step], planned_at = plan, now[0]
        now[0] += 5.0 if step == 41 else 1.0
    assert list(plans) == [46]  # once, after `probe` steps of its own: no re-planning
    assert plans[46].cut.step_s == 1.0  # its first step (5 s) left out
    expected = budget.plan_rl(
        planned=200, done=45, step_s=1.0, elapsed_s=planned_at, eval_every=20, eval_s=3.0
    )
    assert plans[46].cut == expected and step == pacer.target == expected.kept < 200
    assert not pacer.out_of_time()
    now[0] = 160.0
    assert pacer.out_of_time()
    assert PhaseBudget.from_minutes(None).budget_s is None and PhaseBudget.from_minutes(0.5).budget_s == 30


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
    from arborl.trainer.local import budget

    monkeypatch.setattr(budget, "REPLAN_EVERY", 5)
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
