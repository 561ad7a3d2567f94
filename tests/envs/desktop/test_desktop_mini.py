"""The desktop-mini suite validates: every gold script scores 1, giving up at once scores 0."""

from __future__ import annotations

import pytest

from arborl.envs import run_episodes_sync
from arborl.tasks import get_suite

pytestmark = [pytest.mark.docker, pytest.mark.gui, pytest.mark.slow]


class PerTask:
    """One policy per task from a suite's factory (the runner shares a policy between tasks)."""

    def __init__(self, suite, kind: str) -> None:
        self.suite, self.kind, self.policies = suite, kind, {}

    def __call__(self, messages, info):
        tid = info["task_id"]
        if info["turn"] == 0:
            factory = self.suite.gold_policy if self.kind == "gold" else self.suite.empty_policy
            self.policies[tid] = factory(self.suite.task(tid))
        return self.policies[tid](messages, info)


@pytest.fixture(scope="module")
def suite():
    return get_suite("desktop-mini")


def test_gold_scripts_solve_every_task(desktop, suite):
    episodes = run_episodes_sync(
        [desktop.unwrapped], PerTask(suite, "gold"), suite.tasks(), max_turns=suite.max_turns
    )
    report = {e.task_id: (e.total_reward, e.error, e.infos[-1].get("evaluation")) for e in episodes}
    assert all(e.total_reward == 1.0 and e.terminated for e in episodes), report
    assert {e.infos[-1]["evaluation"]["last_action"] for e in episodes} == {"DONE", "FAIL"}


def test_giving_up_at_once_scores_zero(desktop, suite):
    episodes = run_episodes_sync(
        [desktop.unwrapped], PerTask(suite, "empty"), suite.tasks(), max_turns=suite.max_turns
    )
    assert [e.total_reward for e in episodes] == [0.0] * len(episodes)
    assert all(e.turns == 1 and e.terminated and e.error is None for e in episodes)
