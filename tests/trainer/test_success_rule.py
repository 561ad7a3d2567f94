"""One definition of success (issue 51 §2): training's held-out "success" and `arborl eval`'s
are the suite's rule, so on a partial-score suite they are one number, not two under one name."""

from __future__ import annotations

import asyncio

from arborl.agents import AgentEpisode, Trajectory
from arborl.envs.benchmarks import ENV_GRADED, EpisodeRecord, GradeContext
from arborl.tasks import Suite, Task
from arborl.trainer.local.metrics_log import success_metrics

#: Episode totals of a partial-score suite (ScienceWorld's, BFCL multi-turn's): a third of
#: the way, two thirds, done, over-scored, penalised.
TOTALS = [0.0, 1 / 3, 2 / 3, 1.0, 1.4, -0.2]


def eval_success(suite: Suite) -> list[bool]:
    out = []
    for total in TOTALS:
        record = EpisodeRecord(messages=[], infos=[], rewards=[total])
        grade = asyncio.run(ENV_GRADED.grade(None, Task(id="t"), record, GradeContext(suite, None, None)))
        out.append(grade.success)
    return out


def test_training_and_eval_count_the_same_successes():
    episodes = [AgentEpisode(Trajectory(prompt_ids=[1], outcome_reward=r), [], []) for r in TOTALS]
    for suite, expected in (
        (Suite("full", "arborl/Tool-v0", loader=list), [False, False, False, True, True, False]),
        (
            Suite("half", "arborl/Tool-v0", loader=list, success_score=0.5),
            [False, False, True, True, True, False],
        ),
    ):
        assert eval_success(suite) == expected
        assert success_metrics(episodes, suite=suite)["success"] == sum(expected) / len(TOTALS)
    # reward > 0 (training's rule before) would have counted a third of the way as a success
    assert success_metrics(episodes)["success"] == 2 / 6
