"""`arborl train` with `rollout.harness=mini_swe_agent`: a couple of RL steps of the tiny model on
swe-mini, every episode mini-swe-agent's own loop through the gateway, in a sandbox, graded by
arborl's SWE grading. The untrained tiny model writes no tool call (mini-swe-agent answers with
its format error until its step limit), so every grade is 0: this checks the plumbing, not learning."""

from __future__ import annotations

import pytest
from train_cli import train_steps
from transformers import AutoTokenizer

from arborl.trainer.local.trajectory_store import TrajectoryStore


@pytest.mark.slow
@pytest.mark.docker
def test_two_rl_steps_on_mini_swe_agent_episodes(tmp_path, tiny_model):
    pytest.importorskip("minisweagent", reason="mini-swe-agent is not installed: run scripts/setup.sh")
    run = tmp_path / "msa"
    rl = train_steps(
        run,
        "arborl/Code-v0",
        "rollout.harness=mini_swe_agent",
        "tasks.train=suite:swe-mini",
        "tasks.eval_suite=swe-mini",
        "tasks.eval_size=1",
        "async.mode=sync",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=16",
        "rollout.max_context_tokens=2048",
    )
    assert all(e["rollout/reward"] == 0.0 for e in rl), rl
    store = TrajectoryStore(run / "trajectories")
    trajs = [t for i in store.indices() for t in store.get(i)]
    assert len(trajs) >= 8  # two groups of two episodes, each two calls
    for t in trajs:
        # mini-swe-agent's calls, recorded by the gateway: model tokens masked in, its messages out
        assert t.truncation is None and t.turns and t.metrics["harness/steps"] == 0.0
        assert all(len(turn.response_ids) == len(turn.response_logprobs) > 0 for turn in t.turns)
        assert 0 < sum(t.loss_mask().tolist()) < len(t)
    # mini-swe-agent's own words: its task prompt, and its format error. On a format error it drops
    # the model's reply from its history, so the next call starts a new segment (the gateway's
    # stitching): an episode of two calls is two one-turn segments.
    tok = AutoTokenizer.from_pretrained(tiny_model)
    text = "".join(tok.decode(t.token_ids().tolist()) for t in trajs)
    assert "No tool calls found in the response" in text and "When done, run `echo" in text


def test_an_external_harness_is_refused_where_the_trainer_would_drive_its_turns():
    from pydantic import ValidationError

    from arborl.trainer.local.config import TrainConfig

    assert (
        TrainConfig.model_validate({"rollout": {"harness": "mini_swe_agent"}}).rollout.harness
        == "mini_swe_agent"
    )
    with pytest.raises(ValidationError, match="partial_rollouts"):
        TrainConfig.model_validate(
            {"rollout": {"harness": "mini_swe_agent"}, "async": {"mode": "sync", "partial_rollouts": True}}
        )
    with pytest.raises(ValidationError, match=r"rollout\.tree needs arborl's Agent"):
        TrainConfig.model_validate({"rollout": {"harness": "mini_swe_agent", "tree": {}}})
    with pytest.raises(ValidationError, match="harness"):
        TrainConfig.model_validate({"rollout": {"harness": "smolagents"}})
