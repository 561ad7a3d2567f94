"""`arborl train` on episodes longer than the window: every segment is stored and trained,
and a group is counted in episodes, not segments."""

from __future__ import annotations

import asyncio

import pytest
from arith_suite import train_config as config  # also registers the test-arith suite

from arborl.agents import read_trajectories
from arborl.agents.trajectory import episodes_of
from arborl.envs import register_env
from arborl.envs.base import Step, TextEnv
from arborl.trainer.local.metrics_log import read_metrics
from arborl.trainer.local.trainer import Trainer


class Talker(TextEnv):
    """Six turns whatever the model says, each answered at length (reward: an even-length
    first reply, so a group's episodes differ)."""

    async def on_reset(self, task):
        self.first = -1
        return str(task.question)

    async def on_step(self, action):
        if self.turn == 0:
            self.first = len(action)
        done = self.turn + 1 >= 6
        return Step("go on " * 6, reward=float(done and self.first % 2 == 0), terminated=done)


register_env("test/Talker-v0", Talker, force=True)


@pytest.mark.parametrize("mode", ["sliding_window", "summarize"])
def test_a_run_trains_every_segment_of_episodes_longer_than_the_window(tmp_path, mode):
    run = tmp_path / mode
    cfg = config(
        run,
        sft={"steps": 0},
        rollout={
            "env_id": "test/Talker-v0",
            "group_size": 2,
            "groups_per_step": 1,
            "max_turns": 6,
            "max_new_tokens": 12,
            "max_context_tokens": 110,
            "context": mode,
        },
        algorithm={"drop_uniform_groups": False},
        run={"steps": 1, "eval_every": 10, "checkpoint_every": 10},
        **{"async": {"mode": "sync"}},
    )
    asyncio.run(Trainer(cfg).run())
    (step,) = [e for e in read_metrics(run) if e["phase"] == "rl"]
    stored = read_trajectories(run / "trajectories" / "group-000000.parquet")
    episodes = episodes_of(stored)
    assert len(episodes) == 2 and len(stored) > 2  # two episodes, several segments each
    assert step["batch/episodes"] == 2 and step["batch/trajectories"] == len(stored)
    assert step["rollout/segments"] == len(stored) / 2
    for rows in episodes:
        segs = [stored[i] for i in rows]
        assert len({s.episode_id for s in segs}) == 1 and len({s.outcome_reward for s in segs}) == 1
        assert all(len(s) <= 110 for s in segs)
    summaries = [s for s in stored if s.metrics.get("summary")]
    assert bool(summaries) == (mode == "summarize")


def test_impossible_context_settings_are_refused_when_the_config_loads(tmp_path):
    with pytest.raises(
        ValueError, match=r"rollout\.max_new_tokens \(64\) below rollout\.max_context_tokens \(64\)"
    ):
        config(tmp_path, rollout={"context": "summarize", "max_new_tokens": 64, "max_context_tokens": 64})
    with pytest.raises(ValueError, match=r"rollout\.tree with rollout\.context='sliding_window'"):
        config(tmp_path, rollout={"context": "sliding_window", "tree": {}})
