"""Scripted policies run over `arborl/Tool-v0` tasks (shared by the maze and door suites' tests)."""

from __future__ import annotations

import gymnasium

from arborl.envs.episodes import run_episodes_sync


def run_policy(tasks, factory, max_turns):
    """Episodes of `factory(task)` on every task, four envs side by side."""
    envs = [gymnasium.make("arborl/Tool-v0") for _ in range(4)]
    by_id = {t.id: factory(t) for t in tasks}
    return run_episodes_sync(
        envs, lambda m, info: by_id[info["task_id"]](m, info), tasks, max_turns=max_turns
    )
