"""GiGPO as published (Feng et al., 2025, eq. 3-8), against a plain-loop reference written from
the paper's formulas, and the anchor states a real env reports."""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer
from verl.trainer.ppo import core_algos

import arborl.envs  # noqa: F401 - registers the arborl/* ids
from arborl.agents import Agent, AgentConfig, Trajectory, Turn
from arborl.agents.credit import CreditError, compute_advantages, turn_spans
from arborl.trainer.dataproto import trajectories_to_dataproto

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trainer"))
import arith_suite

EPS = 1e-6


def reference_gigpo(rows, omega, gamma, mode, eps=EPS):
    """The paper by plain loops. ``rows``: ``(episode group, [(anchor state, reward), ...])``.

    eq. 3   A_E(i) = (R_i - mean R) / F,  R_i = Σ_t r_{i,t}, over the episodes of i's group
            (a lone episode: mean 0, F 1, as verl-agent and GRPO)
    eq. 5   G_{i,t} = Σ_{k >= t} γ^(k-t) r_{i,k}
    eq. 6   the anchor group of (i, t): every (j, u) of the same episode group with s_{j,u} = s_{i,t}
    eq. 7   A_S(i, t) = (G_{i,t} - mean G) / F over the anchor group; a group of one: 0
    eq. 8   A(i, t) = A_E(i) + ω A_S(i, t)
    F = std + ε (unbiased std) for mean_std_norm, 1 for mean_norm. An unknown state ("") is its
    own group.
    """

    def norm(x, peers, lone_mean):
        if len(peers) == 1:
            mean, std = lone_mean, 1.0
        else:
            mean = sum(peers) / len(peers)
            std = math.sqrt(sum((p - mean) ** 2 for p in peers) / (len(peers) - 1))
        return x - mean if mode == "mean_norm" else (x - mean) / (std + eps)

    totals = [sum(r for _, r in turns) for _, turns in rows]
    returns = [
        [sum(gamma ** (k - t) * turns[k][1] for k in range(t, len(turns))) for t in range(len(turns))]
        for _, turns in rows
    ]
    out = []
    for i, (group, turns) in enumerate(rows):
        peers = [totals[j] for j, (g, _) in enumerate(rows) if g == group]
        a_e = norm(totals[i], peers, lone_mean=0.0)
        row = []
        for t, (state, _) in enumerate(turns):
            anchor = [
                returns[j][u]
                for j, (g, other) in enumerate(rows)
                if g == group
                for u, (s, _) in enumerate(other)
                if (s == state and state != "") or (j, u) == (i, t)
            ]
            a_s = norm(returns[i][t], anchor, lone_mean=returns[i][t])
            row.append(a_e + omega * a_s)
        out.append(row)
    return out


def trajectory(group: str, turns: list[tuple[str, float]], n_tokens: int = 2) -> Trajectory:
    built = [
        Turn(
            [7] * (n_tokens + k % 2),
            [-1.0] * (n_tokens + k % 2),
            observation_ids=[9] * 2,
            reward=r,
            anchor_state_hash=s,
        )
        for k, (s, r) in enumerate(turns)
    ]
    built[-1].observation_ids = []
    return Trajectory([1, 2], built, group_id=group, outcome_reward=sum(r for _, r in turns))


def per_turn(adv: torch.Tensor, data, row: int) -> list[float]:
    out = []
    for a, b in turn_spans(data.batch["response_mask"])[row]:
        vals = adv[row, a:b]
        assert torch.allclose(vals, vals[0].expand_as(vals))  # one value per turn
        out.append(vals[0].item())
    return out


# Group g: three episodes of 3, 2 and 4 turns from the same start s0. Two of them then act in
# s1 (a shared anchor), one goes to s2 (lone), one revisits s0. Group h uses the same hashes
# (another task: never pooled with g), and has a lone episode's worth of unknown states.
HAND_CASE = [
    ("g", [("s0", 0.0), ("s1", 0.0), ("s3", 1.0)]),
    ("g", [("s0", 0.0), ("s1", 0.5)]),
    ("g", [("s0", 0.2), ("s2", 0.0), ("s0", 0.0), ("s4", 0.0)]),
    ("h", [("s0", 1.0), ("s1", 0.0)]),
    ("h", [("s0", 0.0), ("", 0.0), ("", 1.0)]),
    ("k", [("s0", 0.3), ("s5", 0.4)]),  # a lone episode
]


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize(("omega", "gamma"), [(1.0, 0.95), (0.5, 1.0)])
def test_gigpo_equals_the_papers_formulas_on_a_hand_built_case(mode, omega, gamma):
    data = trajectories_to_dataproto([trajectory(g, turns) for g, turns in HAND_CASE], pad_token_id=0)
    adv, _ = compute_advantages(data, "gigpo", step_weight=omega, gamma=gamma, mode=mode)
    expected = reference_gigpo(HAND_CASE, omega, gamma, mode)
    for row, want in enumerate(expected):
        assert per_turn(adv, data, row) == pytest.approx(want, abs=1e-5)
    assert (adv[data.batch["response_mask"] == 0] == 0).all()  # env tokens get nothing


def test_a_few_numbers_of_the_hand_case_checked_by_eye():
    data = trajectories_to_dataproto([trajectory(g, turns) for g, turns in HAND_CASE], pad_token_id=0)
    adv, _ = compute_advantages(data, "gigpo", step_weight=1.0, gamma=1.0, mode="mean_norm")
    # group g: totals 1, 0.5, 0.2 -> mean 17/30; the lone s2 turn has A_S 0, so its A is A_E
    assert per_turn(adv, data, 2)[1] == pytest.approx(0.2 - 1.7 / 3, abs=1e-6)
    # the s1 turns of g: G = 1 and 0.5, mean 0.75 -> A_S = +0.25 / -0.25
    assert per_turn(adv, data, 0)[1] == pytest.approx(1.0 - 1.7 / 3 + 0.25, abs=1e-6)
    assert per_turn(adv, data, 1)[1] == pytest.approx(0.5 - 1.7 / 3 - 0.25, abs=1e-6)
    # the lone episode of k: A_E = R (mean 0); its turns are alone in their anchors
    assert per_turn(adv, data, 5) == pytest.approx([0.7, 0.7], abs=1e-6)


def test_singleton_anchor_groups_get_no_step_advantage():
    """Every turn from a state nobody else acted in: GiGPO reduces to its episode term."""
    case = [("g", [("a", 0.0), ("b", 1.0)]), ("g", [("c", 0.0), ("d", 0.0)])]
    data = trajectories_to_dataproto([trajectory(g, t) for g, t in case], pad_token_id=0)
    adv, _ = compute_advantages(data, "gigpo", step_weight=1.0, mode="mean_norm")
    assert per_turn(adv, data, 0) == pytest.approx([0.5, 0.5], abs=1e-6)
    assert per_turn(adv, data, 1) == pytest.approx([-0.5, -0.5], abs=1e-6)


@pytest.mark.parametrize(("mode", "by_std"), [("mean_norm", False), ("mean_std_norm", True)])
def test_the_episode_term_is_verls_grpo_on_undiscounted_returns(mode, by_std):
    data = trajectories_to_dataproto([trajectory(g, turns) for g, turns in HAND_CASE], pad_token_id=0)
    only_episode, _ = compute_advantages(data, "gigpo", step_weight=0.0, gamma=0.5, mode=mode)
    grpo, _ = core_algos.compute_grpo_outcome_advantage(
        data.batch["token_level_scores"],
        data.batch["response_mask"],
        data.non_tensor_batch["uid"],
        norm_adv_by_std_in_grpo=by_std,
    )
    torch.testing.assert_close(only_episode, grpo, rtol=0, atol=1e-5)


def test_random_batches_match_the_reference():
    rng = np.random.default_rng(3)
    rows = []
    for g in range(6):
        for _ in range(int(rng.integers(1, 5))):
            n = int(rng.integers(1, 6))
            rows.append(
                (
                    f"g{g}",
                    [(f"s{rng.integers(0, 4)}", float(rng.choice([0.0, 0.0, 0.5, 1.0]))) for _ in range(n)],
                )
            )
    data = trajectories_to_dataproto([trajectory(g, t) for g, t in rows], pad_token_id=0)
    for mode in ("mean_norm", "mean_std_norm"):
        adv, _ = compute_advantages(data, "gigpo", step_weight=0.7, gamma=0.9, mode=mode)
        for row, want in enumerate(reference_gigpo(rows, 0.7, 0.9, mode)):
            assert per_turn(adv, data, row) == pytest.approx(want, abs=1e-4)


def test_config_keys_and_errors():
    data = trajectories_to_dataproto([trajectory(g, turns) for g, turns in HAND_CASE], pad_token_id=0)
    by_config, _ = compute_advantages(
        data, "gigpo", config={"gigpo_step_weight": 0.5, "gigpo_gamma": 0.9, "gigpo_mode": "mean_std_norm"}
    )
    by_kwargs, _ = compute_advantages(data, "gigpo", step_weight=0.5, gamma=0.9, mode="mean_std_norm")
    torch.testing.assert_close(by_config, by_kwargs)
    with pytest.raises(CreditError, match="mode"):
        compute_advantages(data, "gigpo", mode="mean")
    fn = core_algos.get_adv_estimator_fn("gigpo")
    with pytest.raises(CreditError, match="after"):
        fn(
            data.batch["token_level_scores"],
            data.batch["response_mask"],
            index=data.non_tensor_batch["uid"],
            next_state_hashes=data.non_tensor_batch["next_state_hashes"],
        )


# ─── the anchors a real env reports ──────────────────────────────────────────────────────


def test_a_real_envs_first_turn_anchor_is_the_same_for_every_episode_of_a_task(tiny_model):
    """arborl/Tool-v0 on one arithmetic task, 3 episodes: every first turn is anchored at the
    state after reset (one hash), every later turn at the state the previous turn left."""
    tok = AutoTokenizer.from_pretrained(tiny_model)
    task = arith_suite.generate(1, 5)[0]
    agent = Agent(None, tok, AgentConfig(max_turns=3, max_new_tokens=64))  # type: ignore[arg-type]

    async def episodes():
        out = []
        for _ in range(3):
            env = gymnasium.make("arborl/Tool-v0")
            try:
                obs, info = await env.unwrapped.areset(options={"task": task})
                reset_hash = info["state_hash"]
                ep = await agent.run_episode(env, task, group_id="g", demo=arith_suite.gold(task))
                out.append((reset_hash, ep.trajectory))
                # the anchor observation: reset's text for the first turn, then the last step's
                env_text = "\n".join(m["content"] for m in ep.messages if m["role"] != "assistant")
                turns = ep.trajectory.turns
                assert turns[0].anchor_observation == "\n".join(m["content"] for m in obs) != ""
                assert all(t.anchor_observation and t.anchor_observation in env_text for t in turns[1:])
                assert len({t.anchor_observation for t in turns}) == len(turns)
            finally:
                env.close()
        return out

    runs = asyncio.run(episodes())
    firsts = {traj.turns[0].anchor_state_hash for _, traj in runs}
    assert len(firsts) == 1 and firsts == {runs[0][0]} and "" not in firsts
    for _, traj in runs:
        assert len(traj.turns) >= 2
        for before, turn in zip(traj.turns, traj.turns[1:], strict=False):
            assert turn.anchor_state_hash == before.env_state_hash != ""
        assert traj.turns[0].anchor_state_hash != traj.turns[0].env_state_hash
    data = trajectories_to_dataproto([traj for _, traj in runs], pad_token_id=0)
    assert [row[0] for row in data.non_tensor_batch["anchor_state_hashes"]] == [runs[0][0]] * 3
    assert [list(r) for r in data.non_tensor_batch["anchor_observations"]] == [
        [t.anchor_observation for t in traj.turns] for _, traj in runs
    ]
