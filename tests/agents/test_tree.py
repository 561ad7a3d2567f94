"""Tree rollouts on the real tiny model: shared prefixes sampled once, leaves token-exact."""

from __future__ import annotations

import asyncio

import pytest
from agent_helpers import agent_for
from countdown import Countdown

from arborl.agents.credit import compute_advantages
from arborl.agents.engines import HFEngineConfig, make_engine
from arborl.agents.trajectory import Turn
from arborl.agents.tree_rollout import TreeConfig, TreeRollout, _suffix
from arborl.trainer.dataproto import trajectories_to_dataproto


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
    adv, values = compute_advantages(data, "tree", normalize="none")
    assert adv.shape == data.batch["responses"].shape
    assert (values[data.batch["response_mask"] == 1] == 1.0).all()  # every leaf succeeds: V = 1
    adv, values = compute_advantages(data, "tree")  # normalised within the group: all at its mean
    assert (values == 0).all() and (adv == 0).all()


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


@pytest.mark.parametrize("branch_at", ["turn", "both"])
async def test_a_tree_of_episodes_cut_at_the_turn_limit_grows_all_its_leaves(engine, tok, branch_at):
    # Countdown from 5 needs 5 turns; with 2 every episode is cut at the limit, where a
    # branch would end before a turn: such states are no fork points (they were picked
    # again and again, and the tree never grew).
    cfg = TreeConfig(leaves=6, roots=2, branch_at=branch_at, token_logprob_threshold=0.0)
    agent = agent_for(engine, tok, max_turns=2, max_new_tokens=6)
    result = await asyncio.wait_for(TreeRollout(agent, Countdown, cfg).run({"id": "c", "start": 5}), 60)
    assert len(result.leaves) == 6 and result.forks["turn"] + result.forks["token"] > 0
    for leaf in result.leaves:
        assert len(leaf.turns) == 2 and leaf.truncation == "max_turns"


async def test_a_tree_whose_every_generation_fails_says_so(engine, tok):
    class Failing(type(engine)):
        async def generate(self, prompts, sampling):
            raise RuntimeError("the engine is down")

    agent = agent_for(Failing(engine.inner), tok, max_turns=3, max_new_tokens=6)
    rollout = TreeRollout(agent, Countdown, TreeConfig(leaves=4, roots=2))
    with pytest.raises(RuntimeError, match="ended before its first turn"):
        await asyncio.wait_for(rollout.run({"id": "c", "start": 3}), 60)


async def test_every_env_a_branch_makes_is_closed(engine, tok):
    """Forks make an env per branch (replay needs a fresh one); none may outlive the tree."""
    made, closed = [], []

    class Counted(Countdown):
        def __init__(self, **kw):
            super().__init__(**kw)
            made.append(self)

        async def aclose(self):
            closed.append(self)
            await super().aclose()

    agent = agent_for(engine, tok, max_turns=4, max_new_tokens=6)
    result = await TreeRollout(agent, Counted, TreeConfig(leaves=5, roots=2, branch_at="turn")).run(
        {"id": "c", "start": 3}
    )
    assert len(result.leaves) == 5 and result.forks["turn"] > 0
    assert len(made) >= 5 and sorted(map(id, closed)) == sorted(map(id, made))


async def test_the_rollout_manager_reuses_branch_envs_and_closes_them(engine, tok, tmp_path):
    """In the trainer a branch's env goes back to the manager's pool: two trees in a row make
    no more envs than one tree runs at once, and `close()` closes every one."""
    from arborl.trainer.local.buffer import GroupBuffer
    from arborl.trainer.local.rollout import RolloutManager
    from arborl.trainer.local.trajectory_store import TrajectoryStore

    made, closed = [], []

    class Counted(Countdown):
        def __init__(self, **kw):
            super().__init__(**kw)
            made.append(self)

        async def aclose(self):
            closed.append(self)
            await super().aclose()

    agent = agent_for(engine, tok, max_turns=3, max_new_tokens=6)
    manager = RolloutManager(
        agent,
        Counted,
        lambda i: {"id": f"c{i}", "start": 2},
        GroupBuffer(capacity=4),
        TrajectoryStore(tmp_path),
        group_size=4,
        limit=lambda: 2,
        max_in_flight=1,
        tree=TreeConfig(leaves=4, roots=2, branches=2, branch_at="turn", max_parallel=2),
    )
    await manager._group(0)
    first = len(made)
    await manager._group(1)
    assert manager.stats.groups_done == 2
    assert len(made) == first <= 2  # at most max(roots, max_parallel) envs at once, then reused
    await manager.close()
    assert sorted(map(id, closed)) == sorted(map(id, made))


async def test_the_engine_reports_each_tokens_sampling_entropy(tiny_model, tok):
    """Entropy of softmax(logits / T) at every sampled position, from the model's own logits."""
    import torch
    from transformers import AutoModelForCausalLM

    from arborl.agents.engines import SamplingParams

    engine = make_engine(HFEngineConfig(model=str(tiny_model)))
    try:
        prompt = tok.encode("Count down from three.")
        gen = (await engine.generate([prompt], SamplingParams(temperature=0.8, max_new_tokens=10, seed=3)))[0]
    finally:
        await engine.close()
    assert len(gen.entropies) == len(gen.token_ids) > 0
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + gen.token_ids])).logits[0, len(prompt) - 1 : -1]
    p = torch.softmax(logits / 0.8, -1)
    expected = -(p * p.clamp_min(1e-30).log()).sum(-1)
    torch.testing.assert_close(torch.tensor(gen.entropies), expected, rtol=1e-3, atol=1e-3)


def test_token_forks_go_where_the_entropy_is_highest():
    from arborl.agents import Turn
    from arborl.agents.tree_rollout import uncertain_token

    # token 1: a flat distribution but a likely sample; token 2: an unlikely sample from a peaked one
    turn = Turn([5, 6, 7, 8], [-0.1, -0.2, -4.0, -0.1], response_entropies=[3.0, 2.5, 0.3, 0.1])
    assert uncertain_token(turn, TreeConfig()) == 1  # entropy (the first token is never a token fork)
    assert uncertain_token(turn, TreeConfig(token_signal="logprob")) == 2
    assert uncertain_token(turn, TreeConfig(token_entropy_threshold=5.0)) is None  # sure throughout
    bare = Turn([5, 6, 7, 8], [-0.1, -0.2, -4.0, -0.1])  # an engine without entropies
    assert uncertain_token(bare, TreeConfig()) == 2


def test_a_budget_across_prompts_goes_to_the_prompt_with_mixed_outcomes():
    """TRACE: one round's branches over two trees, one whose roots disagree (1, 0) and one
    whose roots agree (1, 1): the mixed prompt's start scores p(1-p) = 1/4 on top of the
    exploration bonus and takes the first branches; the agreeing prompt gets only what its
    bonus wins it (none at all without one)."""
    from types import SimpleNamespace

    from arborl.agents import Turn
    from arborl.agents.trajectory import TrajectoryTree
    from arborl.agents.tree_rollout import _Growing

    def grown(outcomes):
        tree = TrajectoryTree(prompt_ids=[1])
        snaps = {-1: SimpleNamespace(done=False)}
        for reward in outcomes:
            first = tree.add(Turn([5], [-0.1]))
            leaf = tree.add(Turn([6], [-0.1]), first)
            tree.nodes[leaf].outcome_reward, tree.nodes[leaf].terminal = reward, True
            snaps[first] = SimpleNamespace(done=False)
        return _Growing({"id": "t"}, tree, snaps)

    mixed, sure = grown([1.0, 0.0]), grown([1.0, 1.0])
    trees = TreeRollout(None, None, TreeConfig(branches=2, branch_at="turn"))  # type: ignore[arg-type]
    picked = trees._pick([sure, mixed], want=2)
    assert [(g, q.node) for g, q in picked] == [(mixed, -1)]
    greedy = TreeRollout(None, None, TreeConfig(branches=1, branch_at="turn", explore=0.0))  # type: ignore[arg-type]
    scores = {
        id(g): [q.score for h, q in greedy._pick([sure, mixed], want=10) if h is g] for g in (sure, mixed)
    }
    assert max(scores[id(sure)]) == 0.0 and max(scores[id(mixed)]) == 0.25
    assert trees._pick([sure], want=2)  # a tree alone still branches (its bonus)


def test_a_round_picks_one_point_per_node():
    """A node that is both a turn fork (its state is kept) and a token fork (an uncertain
    token) is picked once a round: the token split moves its state to the new child, and a
    turn fork at it in the same round found none (KeyError in tool-maze's learning bench)."""
    from types import SimpleNamespace

    from arborl.agents import Turn
    from arborl.agents.trajectory import TrajectoryTree
    from arborl.agents.tree_rollout import _Growing

    tree = TrajectoryTree(prompt_ids=[1])
    first = tree.add(Turn([5, 6, 7], [-0.1, -0.1, -0.1], response_entropies=[0.1, 3.0, 0.1]))
    for reward in (1.0, 0.0):
        leaf = tree.add(Turn([8], [-0.1]), first)
        tree.nodes[leaf].outcome_reward, tree.nodes[leaf].terminal = reward, True
    g = _Growing({"id": "t"}, tree, {-1: SimpleNamespace(done=False), first: SimpleNamespace(done=False)})
    trees = TreeRollout(None, None, TreeConfig(branches=1, branch_at="both", explore=0.0))  # type: ignore[arg-type]
    kinds = {q.at for q in trees._points(tree, g.snaps) if q.node == first}
    assert kinds == {None, 1}  # both kinds of point exist at the node
    picked = [q.node for _, q in trees._pick([g], want=8)]
    assert picked.count(first) == 1


async def test_run_many_grows_every_tree_within_one_budget(engine, tok):
    agent = agent_for(engine, tok, max_turns=4, max_new_tokens=6)
    trees = TreeRollout(agent, Countdown, TreeConfig(leaves=3, roots=1, branch_at="turn"))
    results = await trees.run_many([{"id": "a", "start": 2}, {"id": "b", "start": 3}], ["ga", "gb"], budget=7)
    assert sum(len(r.leaves) for r in results) == 7 and all(len(r.leaves) >= 1 for r in results)
    assert [{leaf.group_id for leaf in r.leaves} for r in results] == [{"ga"}, {"gb"}]


def test_a_token_forks_suffix_keeps_every_field_but_the_tokens_it_drops():
    turn = Turn(
        [5, 6, 7], [-0.1, -0.2, -0.3], observation_ids=[9], reward=1.0, anchor_state_hash="s", step_label=-1.0
    )
    tail = _suffix(turn, 1)
    assert tail.response_ids == [6, 7] and tail.response_logprobs == [-0.2, -0.3]
    assert (tail.step_label, tail.reward, tail.anchor_state_hash) == (-1.0, 1.0, "s")
