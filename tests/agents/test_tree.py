"""Tree rollouts on the real tiny model: shared prefixes sampled once, leaves token-exact."""

from __future__ import annotations

import pytest
from countdown import Countdown
from test_agent import Recording, agent_for
from transformers import AutoTokenizer

from arborl.agents.credit import compute_advantages
from arborl.agents.engines import HFEngineConfig, make_engine
from arborl.agents.tree import TreeConfig, TreeRollout
from arborl.trainer.batch import trajectories_to_dataproto


@pytest.fixture(scope="module")
def tok(tiny_model):
    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture
def engine(tiny_model):
    return Recording(make_engine(HFEngineConfig(model=str(tiny_model))))


def check_token_exact(result, engine):
    """Every generate call's prompt + output is a prefix of some leaf: the leaves hold exactly
    the ids the engine consumed and produced, nothing re-tokenized."""
    leaves = [leaf.token_ids().tolist() for leaf in result.leaves]
    for prompt, out, _ in engine.calls:
        seq = prompt + out
        assert any(leaf[: len(seq)] == seq for leaf in leaves)


@pytest.mark.parametrize("branch_at", ["turn", "token", "both"])
async def test_a_tree_has_its_leaves_and_samples_shared_prefixes_once(engine, tok, branch_at):
    # An untrained model's tokens are all unlikely: a threshold of 0 makes every one a fork point.
    cfg = TreeConfig(leaves=6, roots=2, branches=2, branch_at=branch_at, token_logprob_threshold=0.0)
    agent = agent_for(engine, tok, max_turns=4, max_new_tokens=12)
    result = await TreeRollout(agent, Countdown, cfg).run({"id": "c", "start": 3}, group_id="tree-1")
    assert len(result.leaves) == 6 and {leaf.group_id for leaf in result.leaves} == {"tree-1"}
    assert result.forks[branch_at if branch_at != "both" else "turn"] + result.forks["token"] > 0
    if branch_at == "token":
        assert result.forks["turn"] == 0 and any(n.continues for n in result.tree.nodes)
    sampled_per_leaf = sum(leaf.num_response_tokens for leaf in result.leaves)
    assert result.generated_tokens < sampled_per_leaf  # prefixes shared, sampled once
    assert result.generated_tokens == sum(len(out) for _, out, _ in engine.calls)
    check_token_exact(result, engine)
    for leaf in result.leaves:
        # Each leaf is a whole Countdown episode (3 turns, reward 1 at the end), whatever it forked from.
        assert len(leaf.turns) == 3 and leaf.terminated and leaf.outcome_reward == 1.0
        assert len(leaf.tree_path) == 3
        text = tok.decode(leaf.token_ids())
        assert text.index("3 left") < text.index("2 left") < text.index("1 left")  # "0 left" ends it


async def test_leaves_train_with_the_tree_estimator(engine, tok):
    agent = agent_for(engine, tok, max_turns=4, max_new_tokens=8)
    result = await TreeRollout(agent, Countdown, TreeConfig(leaves=4, roots=1)).run({"id": "c", "start": 2})
    data = trajectories_to_dataproto(result.leaves, pad_token_id=tok.pad_token_id)
    adv, values = compute_advantages(data, "tree")
    assert adv.shape == data.batch["responses"].shape
    assert (values[data.batch["response_mask"] == 1] == 1.0).all()  # every leaf succeeds: V = 1


async def test_a_nondeterministic_env_fails_the_fork_not_the_tree(engine, tok):
    class Noisy(Countdown):
        calls = 0

        async def on_reset(self, task):
            msgs = await super().on_reset(task)
            Noisy.calls += 1
            return [*msgs[:1], {"role": "user", "content": f"{self.left} left ({Noisy.calls})"}]

    agent = agent_for(engine, tok, max_turns=4, max_new_tokens=6)
    cfg = TreeConfig(leaves=3, roots=1, branch_at="turn")
    result = await TreeRollout(agent, Noisy, cfg).run({"id": "c", "start": 2})
    assert result.forks["failed"] > 0
    assert len(result.leaves) == 3  # the failed forks were replaced by fresh samples
