"""The entropy guard's rule: `patience` steps in a row above `factor` x the first steps' mean
(and above `min_entropy`) or above `max_entropy`; steps without an update neither count nor
break a run; a resumed run's history decides as the live steps did."""

from __future__ import annotations

import pytest

from arborl.trainer.local.guards import EntropyGuard, EntropyGuardConfig


def feed(guard: EntropyGuard, entropies: list[float | None]) -> list[str | None]:
    return [guard.observe(step, h) for step, h in enumerate(entropies, start=1)]


def test_a_climb_held_for_patience_steps_stops_the_run_naming_the_option():
    guard = EntropyGuard(EntropyGuardConfig(factor=3.0, baseline_steps=2, patience=3))
    out = feed(guard, [1.0, 1.2, 1.5, 3.4, 3.5, 3.6])  # baseline 1.1, threshold 3.3
    assert out[:5] == [None] * 5
    reason = out[5]
    assert reason is not None
    assert "actor/entropy 3.60 nats at RL step 6" in reason and "steps 4-6" in reason
    assert "run.entropy_guard.factor" in reason and "3 x the first 2 steps' mean 1.10" in reason


def test_a_spike_shorter_than_patience_is_forgiven():
    guard = EntropyGuard(EntropyGuardConfig(factor=3.0, baseline_steps=2, patience=3))
    assert not any(feed(guard, [1.0, 1.0, 5.0, 5.0, 1.0, 5.0, 5.0, 2.0, 5.0]))


def test_steps_without_an_update_neither_count_nor_break_a_run():
    guard = EntropyGuard(EntropyGuardConfig(factor=3.0, baseline_steps=2, patience=3))
    out = feed(guard, [1.0, None, 1.0, 4.0, None, 4.0, None, 4.0])
    assert out[:-1] == [None] * 7 and out[-1] is not None and "steps 4-8" in out[-1]


def test_a_near_deterministic_policy_may_multiply_a_tiny_entropy():
    cfg = EntropyGuardConfig(factor=3.0, baseline_steps=2, patience=2, min_entropy=1.0)
    assert not any(feed(EntropyGuard(cfg), [0.05, 0.05, 0.6, 0.8, 0.9]))  # 18x, under 1 nat
    assert feed(EntropyGuard(cfg), [0.05, 0.05, 1.1, 1.2])[-1] is not None


def test_the_absolute_bound_applies_from_the_first_step():
    guard = EntropyGuard(EntropyGuardConfig(factor=None, max_entropy=6.0, patience=2))
    out = feed(guard, [6.5, 6.6])
    assert out == [None, out[1]] and out[1] is not None and "the bound 6" in out[1]


def test_off_when_neither_rule_is_set():
    guard = EntropyGuard(EntropyGuardConfig(factor=None, max_entropy=None, patience=1))
    assert not any(feed(guard, [1.0, 100.0, float("nan")]))


def test_nan_entropy_counts_as_high():
    guard = EntropyGuard(EntropyGuardConfig(factor=None, max_entropy=6.0, patience=1))
    assert feed(guard, [float("nan")])[0] is not None


def test_a_resumed_run_replays_its_history():
    cfg = EntropyGuardConfig(factor=3.0, baseline_steps=2, patience=3)
    events = [{"step": i, "actor/entropy": h} for i, h in enumerate([1.0, 1.0, 4.0, 4.0], start=1)]
    resumed = EntropyGuard(cfg)
    assert resumed.replay(events) is None
    assert resumed.observe(5, 4.0) is not None  # the third high step in a row, across the resume
    stopped = [*events, {"step": 5, "actor/entropy": 4.0}]
    assert EntropyGuard(cfg).replay(stopped) is not None  # stops again at once, unchanged
    assert EntropyGuard(cfg.model_copy(update={"factor": 10.0})).replay(stopped) is None


def test_the_defaults_stop_the_benchmark_run_that_dissolved_and_spare_the_ones_that_came_back():
    """Entropy curves of bench/results/learning-textworld-runs: tree-gigpo-4 climbed from 1 to
    7 nats (ln 2048 = 7.6) and stayed; tree-tree-0 rose 5x its start and held there, learning
    (30 % held-out, GRPO's range)."""
    dissolved = [1.5, 1.0, 0.9, 1.2, 1.7, 1.6, 3.7, 3.1, 4.8, 4.1, 5.0, 4.6, 6.2, 6.3, 6.3]
    dissolved += [6.7, 7.0, 7.0, 7.0, 6.8]
    came_back = [1.2, 0.9, 0.8, 1.0, 1.1, 1.0, 3.1, 3.7, 4.1, 4.5, 3.9, 3.5, 5.6, 4.3, 4.4, 5.0]
    came_back += [5.3, 4.4, 4.2, 2.9, 3.9, 3.8, 3.4, 2.9, 4.9, 4.9, 3.7, 4.8, 3.7, 3.9, 4.8, 5.0]
    assert feed(EntropyGuard(EntropyGuardConfig()), dissolved)[-1] is not None
    assert not any(feed(EntropyGuard(EntropyGuardConfig()), came_back))


def test_config_refuses_a_factor_that_is_no_climb():
    with pytest.raises(ValueError):
        EntropyGuardConfig(factor=1.0)
