"""A prompt prefix shared by a micro-batch is computed once: same log-probs, same gradients."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from arborl.agents import Trajectory, Turn
from arborl.trainer.dataproto import trajectories_to_dataproto
from arborl.trainer.local.learner import Learner, LearnerConfig
from arborl.trainer.local.prefix import common_prefix_length


@pytest.fixture(scope="module")
def base_model(tiny_model):
    return AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)


def shared_batch(vocab: int, same_prompt: bool, seed: int = 0, systems: int = 1):
    rng = np.random.default_rng(seed)
    # what every episode's prompt starts with; with 2, alternate rows start with another one
    # (a mixed suite: each half has its own system prompt)
    prompts = [rng.integers(0, vocab, 40).tolist() for _ in range(systems)]
    question = rng.integers(0, vocab, 5).tolist()
    trajs = []
    for i in range(6):
        q = question if same_prompt else rng.integers(0, vocab, int(rng.integers(2, 9))).tolist()
        turns = []
        for k in range(2):
            ids = rng.integers(0, vocab, int(rng.integers(2, 7))).tolist()
            obs = rng.integers(0, vocab, 3).tolist() if k == 0 else []
            turns.append(Turn(ids, [-1.0] * len(ids), observation_ids=obs))
        trajs.append(Trajectory(prompts[i % systems] + q, turns, group_id=str(i // 3)))
    data = trajectories_to_dataproto(trajs, pad_token_id=0)
    data.batch["advantages"] = torch.linspace(-1, 1, 6).unsqueeze(1) * data.batch["response_mask"]
    return data


@pytest.mark.parametrize(("same_prompt", "systems"), [(False, 1), (True, 1), (False, 2)])
def test_sharing_the_prefix_changes_nothing_but_the_cost(base_model, same_prompt, systems):
    results = []
    for share in (0, 16):
        model = copy.deepcopy(base_model)
        data = shared_batch(model.config.vocab_size, same_prompt, systems=systems)
        cfg = LearnerConfig(
            lr=1e-3, micro_batch_size=6, share_prefix_min=share, grad_clip=1e9, correction="none"
        )
        learner = Learner(model, cfg)
        logp = learner.compute_logprobs(data)
        data.batch["rollout_log_probs"] = logp  # on-policy: no token sits at a clip boundary
        learner.optimizer.step = lambda: None  # keep the gradients to compare them
        learner.ppo_update(data)
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results.append((logp, grads))
    (lp0, g0), (lp1, g1) = results
    torch.testing.assert_close(lp1, lp0, rtol=0, atol=2e-5)
    # Summing the rows' prefix gradients before the prefix computation only changes rounding:
    # float32 round-off over the whole gradient (a wrong path would be off by O(1)).
    assert float((g1 - g0).norm() / g0.norm()) < 2e-6


def test_micro_batches_keep_to_one_system_prompt(base_model):
    """Rows of two system prompts, alternating: each micro-batch holds one prompt's rows (so
    it shares their 40 tokens), not a mix that shares none; with sharing off, one batch."""
    data = shared_batch(base_model.config.vocab_size, same_prompt=False, systems=2)
    learner = Learner(base_model, LearnerConfig(micro_batch_size=6, share_prefix_min=16))
    parts = learner._micro_batches(data)
    assert sorted(sorted(idx.tolist()) for idx, _ in parts) == [[0, 2, 4], [1, 3, 5]]
    for _, mb in parts:
        prompt_end = mb["input_ids"].shape[1] - mb["responses"].shape[1]
        starts = prompt_end - mb["attention_mask"][:, :prompt_end].sum(-1)
        assert common_prefix_length(mb["input_ids"], starts, prompt_end) >= 40
    learner.config.share_prefix_min = 0
    assert [len(idx) for idx, _ in learner._micro_batches(data)] == [6]


def test_the_shared_prefix_is_found_and_keeps_each_prompts_last_token():
    ids = torch.tensor([[0, 0, 7, 8, 9, 1, 50, 60], [7, 8, 9, 1, 2, 3, 51, 61], [0, 7, 8, 9, 1, 4, 52, 62]])
    starts = torch.tensor([2, 0, 1])  # prompts end at column 6
    assert common_prefix_length(ids, starts, 6) == 3  # 7 8 9 (the 4th token, 1, is some prompt's last)
    same = torch.tensor([[5, 6, 7, 9], [5, 6, 7, 9]])
    assert common_prefix_length(same, torch.tensor([0, 0]), 3) == 2  # identical prompts: all but the last
