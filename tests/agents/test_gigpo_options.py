"""GiGPO's options taken from verl-agent: episode normalisation over step rows, and similarity
grouping of anchor observations; and the anchor-group statistics.

The references below are plain-loop readings of verl-agent's ``gigpo/core_gigpo.py``
(github.com/langfengQ/verl-agent), where every turn is one batch row:

- ``episode_norm_reward`` with ``compute_mean_std_cross_steps=True`` (its default, the one
  ``compute_gigpo_outcome_advantage`` uses): a group's mean and std are over its *step rows*,
  each holding its episode's return (``agent_system/reward_manager/episode.py`` puts
  ``episode_rewards`` on every row); a group with a single row gets mean 0, std 1.
- ``build_step_group``: per episode group (``np.unique(index)``), rows in batch order; without
  similarity, equal observations are one group; with it, a row joins the first cluster whose
  representative (its first row) ``are_similar`` to it —
  ``SequenceMatcher(None, obs, rep).ratio() >= similarity_thresh`` — else starts one.
- ``step_norm_reward``: the rows of one step group less their mean (/ std + ε for
  ``mean_std_norm``; std 1 for a group of one, whose mean is itself).
- ``compute_step_discounted_returns``: ``G_t = r_t + γ G_{t+1}`` per trajectory.
"""

from __future__ import annotations

import math
import random
from difflib import SequenceMatcher

import numpy as np
import pytest
import torch

from arborl.agents import Trajectory, Turn
from arborl.agents.credit import CreditError, compute_advantages, turn_spans
from arborl.agents.credit.anchors import (
    anchor_group_stats,
    batch_anchor_stats,
    similar_state_ids,
    similarity_thresh_of,
)
from arborl.trainer.dataproto import trajectories_to_dataproto

EPS = 1e-6


# ─── verl-agent, read as plain loops ─────────────────────────────────────────────────────


def verl_agent_clusters(obs: list[str], index: list[str], thresh: float | None) -> list[int]:
    """``build_step_group``: one cluster id per row (``thresh`` None: exact observations)."""
    out = [-1] * len(obs)
    n = 0
    for idx in sorted(set(index)):
        clusters: list[tuple[str, list[int]]] = []
        for loc in [i for i in range(len(obs)) if index[i] == idx]:
            for rep, locs in clusters:
                same = (
                    obs[loc] == rep
                    if thresh is None
                    else SequenceMatcher(None, obs[loc], rep).ratio() >= thresh
                )
                if same:
                    locs.append(loc)
                    break
            else:
                clusters.append((obs[loc], [loc]))
        for _, locs in clusters:
            for loc in locs:
                out[loc] = n
            n += 1
    return out


def verl_agent_gigpo(rows, omega, gamma, mode, thresh=None):
    """``compute_gigpo_outcome_advantage`` on step rows. ``rows``: ``(group, [(obs, reward)])``;
    returns one list of advantages per trajectory."""
    remove_std = mode == "mean_norm"
    flat = []  # (group, trajectory, episode return, discounted return, observation)
    for k, (group, turns) in enumerate(rows):
        total, returns, running = sum(r for _, r in turns), [], 0.0
        for _, r in reversed(turns):
            running = r + gamma * running
            returns.insert(0, running)
        flat += [(group, k, total, g, o) for (o, _), g in zip(turns, returns, strict=True)]

    def norm(x, peers, lone_mean):
        if len(peers) == 1:
            mean, std = lone_mean, 1.0
        else:
            mean = sum(peers) / len(peers)
            std = math.sqrt(sum((p - mean) ** 2 for p in peers) / (len(peers) - 1))
        return x - mean if remove_std else (x - mean) / (std + EPS)

    clusters = verl_agent_clusters([f[4] for f in flat], [f[0] for f in flat], thresh)
    out: list[list[float]] = [[] for _ in rows]
    for i, (group, k, total, g, _) in enumerate(flat):
        episode = norm(total, [f[2] for f in flat if f[0] == group], lone_mean=0.0)
        step = norm(g, [f[3] for f, c in zip(flat, clusters, strict=True) if c == clusters[i]], lone_mean=g)
        out[k].append(episode + omega * step)
    return out


# ─── helpers ─────────────────────────────────────────────────────────────────────────────


def batch(rows, hashes_from_text: bool = True):
    """Trajectories of ``(group, [(observation, reward)])``; the state hash is the observation
    (as verl-agent's exact grouping), or unique per turn (``hashes_from_text=False``)."""
    trajs = []
    for k, (group, turns) in enumerate(rows):
        built = [
            Turn(
                [7] * (2 + t % 2),
                [-1.0] * (2 + t % 2),
                observation_ids=[9, 9],
                reward=r,
                anchor_state_hash=obs if hashes_from_text else f"{k}/{t}",
                anchor_observation=obs,
            )
            for t, (obs, r) in enumerate(turns)
        ]
        built[-1].observation_ids = []
        trajs.append(Trajectory([1, 2], built, group_id=group, outcome_reward=sum(r for _, r in turns)))
    return trajectories_to_dataproto(trajs, pad_token_id=0)


def per_turn(adv: torch.Tensor, data) -> list[list[float]]:
    spans = turn_spans(data.batch["response_mask"])
    return [[adv[row, a].item() for a, _ in spans[row]] for row in range(len(spans))]


def assert_rows_close(got, want, tol=1e-5):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, abs=tol)


# ─── episode normalisation over step rows ────────────────────────────────────────────────

# Trajectories of 3, 1 and 2 turns in group g (the long one succeeds: step rows weigh it 3
# times), a lone 2-turn episode in k (verl-agent's step rows: two rows, so mean R, A_E 0), and
# group h whose two episodes have equal lengths (both rules agree there).
UNEVEN = [
    ("g", [("s0", 0.0), ("s1", 0.0), ("s2", 1.0)]),
    ("g", [("s0", 0.0)]),
    ("g", [("s0", 0.5), ("s1", 0.0)]),
    ("k", [("s0", 0.3), ("s9", 0.4)]),
    ("h", [("s0", 1.0), ("s1", 0.0)]),
    ("h", [("s0", 0.0), ("s1", 0.0)]),
]


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize(("omega", "gamma"), [(1.0, 0.95), (0.0, 1.0)])
def test_step_rows_episode_norm_equals_verl_agents(mode, omega, gamma):
    data = batch(UNEVEN)
    adv, _ = compute_advantages(
        data, "gigpo", step_weight=omega, gamma=gamma, mode=mode, episode_norm="step_rows"
    )
    assert_rows_close(per_turn(adv, data), verl_agent_gigpo(UNEVEN, omega, gamma, mode))


def test_step_rows_by_hand_and_the_default_stays_the_papers():
    data = batch(UNEVEN)
    rows, _ = compute_advantages(data, "gigpo", step_weight=0.0, mode="mean_norm", episode_norm="step_rows")
    paper, _ = compute_advantages(data, "gigpo", step_weight=0.0, mode="mean_norm")
    # group g: step rows hold 1, 1, 1, 0, 0.5, 0.5 -> mean 4/6; per trajectory 1, 0, 0.5 -> 0.5
    assert per_turn(rows, data)[0] == pytest.approx([1 - 4 / 6] * 3, abs=1e-6)
    assert per_turn(paper, data)[0] == pytest.approx([0.5] * 3, abs=1e-6)
    # the lone 2-turn episode: two rows, mean 0.7 -> 0 (paper: mean 0, A_E = R)
    assert per_turn(rows, data)[3] == pytest.approx([0.0, 0.0], abs=1e-6)
    assert per_turn(paper, data)[3] == pytest.approx([0.7, 0.7], abs=1e-6)
    # equal lengths: the rules agree
    assert per_turn(rows, data)[4] == pytest.approx(per_turn(paper, data)[4], abs=1e-6)


# ─── the discount: verl-agent's recipes ──────────────────────────────────────────────────

# Both episodes of group g succeed (a uniform outcome); the first tries a locked door in s0
# (it stays in s0) before it moves on. With γ = 1 every turn from s0 returns 1 and the loop is
# never told apart; verl-agent's recipes (run_sokoban.sh, run_alfworld.sh, run_webshop.sh) set
# algorithm.gamma=0.95, under which the looping turn returns 0.95² < 0.95.
LOOP = [
    ("g", [("s0", 0.0), ("s0", 0.0), ("s1", 1.0)]),
    ("g", [("s0", 0.0), ("s1", 1.0)]),
]


@pytest.mark.parametrize("config", [None, {"gamma": 1.0}])  # verl's AlgoConfig default is GAE's γ = 1
def test_the_default_discount_is_verl_agents_recipes(config):
    data = batch(LOOP)
    adv, _ = compute_advantages(data, "gigpo", config=config)
    want = verl_agent_gigpo(LOOP, 1.0, 0.95, "mean_norm")
    assert_rows_close(per_turn(adv, data), want)
    # by hand: the s0 anchor group holds 0.95², 0.95 and 0.95; A_E = 0 (equal outcomes)
    mean = (0.95**2 + 2 * 0.95) / 3
    assert per_turn(adv, data)[0][0] == pytest.approx(0.95**2 - mean, abs=1e-6)
    assert per_turn(adv, data)[0][0] < 0 < per_turn(adv, data)[1][0]
    undiscounted, _ = compute_advantages(data, "gigpo", config={"gigpo_gamma": 1.0})
    assert undiscounted.abs().max() == 0  # γ = 1: nothing to tell the loop from the exit


def test_episode_norm_from_config_and_a_bad_name():
    data = batch(UNEVEN)
    by_config, _ = compute_advantages(
        data, "gigpo", config={"gigpo_episode_norm": "step_rows", "gigpo_gamma": 0.9}
    )
    by_kwargs, _ = compute_advantages(data, "gigpo", episode_norm="step_rows", gamma=0.9)
    torch.testing.assert_close(by_config, by_kwargs)
    with pytest.raises(CreditError, match="episode_norm"):
        compute_advantages(data, "gigpo", episode_norm="step")


# ─── similarity grouping of anchor observations ──────────────────────────────────────────

ROOM = "You are in the kitchen. There is a table with a brass key and an apple on it. Exits: north, east."
HALL = "You are in the hallway. A long corridor stretches north; a door leads south. Exits: north, south."


def noisy(turn: int, text: str) -> str:
    return f"Turn {turn}. {text}"


def test_observations_differing_only_in_a_turn_counter_share_an_anchor():
    rows = [
        ("g", [(noisy(1, HALL), 0.0), (noisy(2, ROOM), 1.0)]),
        ("g", [(noisy(1, HALL), 0.0), (noisy(2, HALL), 0.0), (noisy(3, ROOM), 0.0)]),
        ("g", [(noisy(1, HALL), 0.0), (noisy(4, ROOM) + " A fly buzzes.", 0.5)]),
        ("h", [(noisy(7, ROOM), 1.0)]),  # another task: never pooled with g
    ]
    assert SequenceMatcher(None, noisy(3, ROOM), noisy(2, ROOM)).ratio() >= 0.95
    data = batch(rows)
    opts = {"gamma": 0.9, "episode_norm": "step_rows"}
    exact, _ = compute_advantages(data, "gigpo", **opts)
    similar, _ = compute_advantages(data, "gigpo", **opts, enable_similarity=True, similarity_thresh=0.95)
    assert_rows_close(per_turn(similar, data), verl_agent_gigpo(rows, 1.0, 0.9, "mean_norm", thresh=0.95))
    assert_rows_close(per_turn(exact, data), verl_agent_gigpo(rows, 1.0, 0.9, "mean_norm"))
    # the kitchen turns of g: returns 1, 0, 0.5 pool (mean 0.5) only with similarity
    assert per_turn(similar, data)[0][1] - per_turn(exact, data)[0][1] == pytest.approx(0.5, abs=1e-6)
    # similarity groups by text, not by hash: here every hash is different
    unique = batch(rows, hashes_from_text=False)
    by_text, _ = compute_advantages(unique, "gigpo", **opts, enable_similarity=True)
    torch.testing.assert_close(by_text, similar)


def test_a_cluster_is_joined_by_likeness_to_its_first_member_only():
    """verl-agent compares each row with each cluster's representative, not with every member:
    a chain of small changes starts a new cluster once it drifts from the first text."""
    a = "abcdefghij" * 2
    b = a[:-1] + "X"  # 19/20 like a
    c = b[:-2] + "YX"  # like b, only 18/20 like a
    assert SequenceMatcher(None, b, a).ratio() >= 0.92 > SequenceMatcher(None, c, a).ratio()
    assert SequenceMatcher(None, c, b).ratio() >= 0.92
    ids = similar_state_ids([a, b, c, c, a], ["g"] * 5, 0.92)
    assert ids.tolist() == verl_agent_clusters([a, b, c, c, a], ["g"] * 5, 0.92) == [0, 0, 1, 1, 0]


@pytest.mark.parametrize("thresh", [0.6, 0.9, 0.95])
def test_random_noisy_observations_cluster_as_verl_agent(thresh):
    rng = random.Random(5)
    bases = [
        ROOM,
        HALL,
        ROOM.replace("kitchen", "pantry"),
        HALL * 3,
    ]  # the last one: over 200 characters (autojunk)
    flavours = ["", " A fly buzzes.", " You hear a clock tick somewhere.", " Rain taps the window."]
    rows = []
    for g in range(3):
        for _ in range(4):
            n = rng.randint(1, 4)
            rows.append(
                (
                    f"g{g}",
                    [
                        (
                            noisy(rng.randint(1, 30), rng.choice(bases) + rng.choice(flavours)),
                            rng.choice([0.0, 1.0]),
                        )
                        for _ in range(n)
                    ],
                )
            )
    obs = [o for _, turns in rows for o, _ in turns]
    index = [g for g, turns in rows for _ in turns]
    ids = similar_state_ids(obs, index, thresh)
    want = verl_agent_clusters(obs, index, thresh)
    # the same partition (ids may be numbered differently)
    assert len(set(zip(ids.tolist(), want, strict=True))) == len(set(want)) == len(set(ids.tolist()))
    data = batch(rows, hashes_from_text=False)
    for mode in ("mean_norm", "mean_std_norm"):
        adv, _ = compute_advantages(
            data,
            "gigpo",
            gamma=0.95,
            mode=mode,
            episode_norm="step_rows",
            enable_similarity=True,
            similarity_thresh=thresh,
        )
        assert_rows_close(
            per_turn(adv, data), verl_agent_gigpo(rows, 1.0, 0.95, mode, thresh=thresh), tol=1e-4
        )


def test_similarity_options_and_errors():
    rows = [("g", [(noisy(1, ROOM), 1.0)]), ("g", [(noisy(2, ROOM), 0.0)])]
    data = batch(rows, hashes_from_text=False)
    by_config, _ = compute_advantages(
        data, "gigpo", config={"gigpo_enable_similarity": True, "gigpo_similarity_thresh": 0.9}
    )
    by_kwargs, _ = compute_advantages(data, "gigpo", enable_similarity=True, similarity_thresh=0.9)
    torch.testing.assert_close(by_config, by_kwargs)
    with pytest.raises(CreditError, match=r"\(0, 1\)"):
        compute_advantages(data, "gigpo", enable_similarity=True, similarity_thresh=1.0)
    del data.non_tensor_batch["anchor_observations"]
    with pytest.raises(CreditError, match="anchor_observations"):
        compute_advantages(data, "gigpo", enable_similarity=True)
    # rows that showed pictures: similarity (text only) is refused, state hashes are not
    data = batch(rows, hashes_from_text=True)
    pixels = {"pixel_values": torch.zeros(4, 8), "image_grid_thw": torch.tensor([[1, 2, 2]])}
    data.non_tensor_batch["multi_modal_inputs"] = np.array([pixels, {}], dtype=object)
    with pytest.raises(CreditError, match="pictures"):
        compute_advantages(data, "gigpo", enable_similarity=True)
    with pytest.raises(CreditError, match="pictures"):
        compute_advantages(data, "gigpo", config={"gigpo_enable_similarity": True})
    compute_advantages(data, "gigpo")  # by the state hashes
    data.non_tensor_batch["multi_modal_inputs"] = np.array([{}, {}], dtype=object)  # text rows
    compute_advantages(data, "gigpo", enable_similarity=True)
    # an unknown observation ("") never matches, as an unknown hash
    assert similar_state_ids(["", "", "x" * 30, "x" * 30], ["g"] * 4, 0.9).tolist() == [0, 1, 2, 2]


# ─── anchor-group statistics ─────────────────────────────────────────────────────────────


def test_anchor_group_stats_by_hand():
    # group g: s0 ×3, s1 ×2, s2 ×1; group h: s0 ×1 (not pooled with g's s0)
    groups = ["g", "g", "g", "g", "g", "g", "h"]
    states = np.array([0, 1, 0, 2, 1, 0, 0])
    stats = anchor_group_stats(groups, states)
    assert stats == {"turns_shared": 5 / 7, "group_size": 7 / 4, "groups": 4.0}
    assert anchor_group_stats([], []) == {
        "turns_shared": 0.0,
        "group_size": 0.0,
        "groups": 0.0,
    }


def test_batch_anchor_stats_group_as_the_gigpo_options_say():
    groups = ["g", "g", "h"]
    hashes = [["a", "b"], ["a", "c"], ["a"]]  # h's "a" is another task's state
    texts = [[noisy(1, ROOM), noisy(2, HALL)], [noisy(1, ROOM), noisy(5, HALL)], [noisy(1, ROOM)]]
    assert batch_anchor_stats(groups, hashes, texts) == {
        "turns_shared": 2 / 5,
        "group_size": 5 / 4,
        "groups": 4.0,
        "turns_recurring": 2 / 5,  # "a" in both of g's episodes
        "turns_repeated": 0.0,
    }
    thresh = similarity_thresh_of({"enable_similarity": True})
    assert thresh == 0.95 and similarity_thresh_of({"similarity_thresh": 0.5}) is None
    assert batch_anchor_stats(groups, hashes, texts, thresh) == {
        "turns_shared": 4 / 5,
        "group_size": 5 / 3,
        "groups": 3.0,
        "turns_recurring": 4 / 5,
        "turns_repeated": 0.0,
    }


def test_recurrence_across_episodes_is_told_from_repetition_in_place():
    # group g, episode 0 stays in s0 twice (a locked door) then reaches s1; episode 1 starts in
    # s2 and reaches s1: s0's group is one episode repeating itself, s1's recurs across two.
    groups = ["g", "g"]
    hashes = [["s0", "s0", "s1"], ["s2", "s1"]]
    rewards = [[0.0, 0.0, 1.0], [0.0, 1.0]]
    stats = batch_anchor_stats(groups, hashes, [[""] * 3, [""] * 2], rewards=rewards, gamma=0.95)
    assert stats["turns_shared"] == 4 / 5
    assert stats["turns_repeated"] == 2 / 5 and stats["turns_recurring"] == 2 / 5
    # returns: s0 holds 0.95² and 0.95 (differ: both moved), s1 holds 1 and 1 (no step signal)
    assert stats["step_nonzero"] == 2 / 5
    undiscounted = batch_anchor_stats(groups, hashes, [[""] * 3, [""] * 2], rewards=rewards, gamma=1.0)
    assert undiscounted["step_nonzero"] == 0.0
