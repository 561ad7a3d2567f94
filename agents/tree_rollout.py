"""Tree rollouts: branch episodes at turn boundaries and at uncertain tokens, sampling every
shared prefix once.

    trees = TreeRollout(agent, env_factory, TreeConfig(leaves=8, roots=2))
    result = await trees.run(task)
    result.tree                  # TrajectoryTree: shared prefixes stored once
    result.leaves                # one Trajectory per leaf, same group id, `tree_path` set
    result.generated_tokens      # tokens sampled for the whole tree

How a tree grows, in rounds::

    round 0   `roots` independent episodes                 r1 ──●──●──● (1)    r2 ──●──● (0)
    round k   pick fork points, run `branches` per point   r1 ──●──●──● (1)
              until the tree has `leaves` leaves                  └──●──● (0)  ← forked after turn 1
                                                                   ●━━━◐──● (1) ← forked at token 7
                                                                            of turn 2

Fork points are turn boundaries (the env state after a turn) and uncertain tokens inside a
turn: the token whose next-token distribution had the highest entropy (at least
`token_entropy_threshold` nats; the engine reports it with each sampled token), as TreeRL's
entropy-guided forking and lookahead tree rollouts do, or, where the engine reports no
entropies, the least likely sampled token (log-prob below `token_logprob_threshold`, ARPO).
A token fork keeps the turn's first tokens and samples the rest again. Points are
scored TRACE-style, favouring prefixes whose subtrees have mixed outcomes::

    score(n) = p(1 - p) + explore / (1 + leaves below n)      p = success rate below n

on outcomes in [0, 1] (`fork_outcome`: success, reward > 0, by default; or rewards min-max
scaled, where p(1 - p) becomes their variance), never raw returns: Sokoban's run from -3 to
+10, where p(1 - p) is largest for the failing subtrees. Ties go to deeper points (more
shared tokens) where the leaves below disagree, to shallower ones where they all agree
(`_pick` says why). The env state at a fork point is rebuilt
by replaying the prefix's actions in a fresh env (`Agent.fork`; a nondeterministic env is
caught there). `bench/bench_tree.py` measures replay against the alternative.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import gymnasium
from pydantic import BaseModel, ConfigDict, Field

from arborl.envs import aclose, arelease

from .agent import Agent, EpisodeState, ForkMismatch
from .trajectory import Trajectory, TrajectoryTree, Turn, join_turns

log = logging.getLogger(__name__)


class TreeConfig(BaseModel):
    """Shape and budget of one task's rollout tree."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    leaves: int = Field(8, ge=1, description="leaf trajectories per tree (the group size)")
    roots: int = Field(2, ge=1, description="independent episodes before any branching")
    branches: int = Field(2, ge=1, description="new branches started at each chosen fork point")
    branch_at: Literal["turn", "token", "both"] = Field("both", description="where forks may happen")
    token_signal: Literal["entropy", "logprob"] = Field(
        "entropy",
        description="what makes a token a fork point: the entropy of the distribution it was "
        "sampled from (the policy was unsure: TreeRL / lookahead), or a low sampled log-prob; "
        "turns whose engine reports no entropies use the log-prob",
    )
    token_entropy_threshold: float = Field(
        1.0, ge=0, description="entropy (nats) at or above it: a fork point"
    )
    token_logprob_threshold: float = Field(-2.0, description="a sampled token below it is a fork point")
    explore: float = Field(0.25, ge=0, description="bonus for points with few leaves below")
    fork_outcome: Literal["success", "minmax"] = Field(
        "success",
        description="a leaf's outcome as fork points are scored: success (reward > 0 → 1, else 0; "
        "TRACE's p(1 - p), the variance of Bernoulli success), or the reward min-max scaled to [0, 1] "
        "over the leaves of the trees grown together, scored by its variance (graded rewards: "
        "partial progress counts where no leaf succeeds yet)",
    )
    max_parallel: int = Field(8, ge=1, description="branches run at once in a round")
    prompts: int = Field(
        1,
        ge=1,
        description="trees grown together under one budget of leaves × prompts leaves (TRACE): "
        "branches go to the prompts whose outcomes are mixed; each tree stays its own group, "
        "of at least `roots` leaves",
    )


@dataclass
class TreeResult:
    tree: TrajectoryTree
    leaves: list[Trajectory]
    generated_tokens: int
    forks: dict[str, int] = field(default_factory=dict)  # "turn" / "token" / "failed" counts


@dataclass
class _Growing:
    """One task's tree while it grows: its episodes' snapshots at each node (-1: the start)."""

    task: Any
    tree: TrajectoryTree
    snaps: dict[int, EpisodeState] = field(default_factory=dict)
    forks: dict[str, int] = field(default_factory=lambda: {"turn": 0, "token": 0, "failed": 0})
    replay_works: bool = True


@dataclass
class _Point:
    """A place to branch from: after `node` (a turn boundary; -1: the start), or inside
    `node`'s reply at token `at` (a token fork)."""

    node: int
    at: int | None
    score: float
    depth: int
    mixed: bool = False  # the leaves below disagree (p(1 - p) > 0)


class TreeRollout:
    """Grows one tree per task with an `Agent` and fresh envs from `env_factory`."""

    def __init__(
        self,
        agent: Agent,
        env_factory: Callable[[], gymnasium.Env],
        config: TreeConfig | None = None,
        release: Callable[[gymnasium.Env], Awaitable[None] | None] | None = None,
    ):
        """Every env a branch takes from `env_factory` is handed to `release` when the branch
        ends, however it ends (default: closed). A pool passes its own (`RolloutManager` puts
        envs back for the next branch)."""
        self.agent, self.env_factory = agent, env_factory
        self.config = config or TreeConfig()
        self.release = release or _close_env

    async def run(self, task: Any, group_id: str | None = None) -> TreeResult:
        """Grow one tree of `leaves` leaves for `task`."""
        return (await self.run_many([task], None if group_id is None else [group_id]))[0]

    async def run_many(
        self, tasks: list[Any], group_ids: list[str] | None = None, budget: int | None = None
    ) -> list[TreeResult]:
        """One tree per task, grown together under one leaf budget (default ``leaves`` per task),
        TRACE-style: every tree gets its ``roots``, then each round the fork points of all the
        trees compete on one score, so branches go to the prompts, and the prefixes, whose
        outcomes are mixed (``p(1 - p)``), and a prompt whose roots all agree gets only what the
        exploration bonus wins it."""
        cfg = self.config
        ids = group_ids or [uuid.uuid4().hex for _ in tasks]
        grows = [
            _Growing(task, TrajectoryTree(prompt_ids=[], task_id="", group_id=gid))
            for task, gid in zip(tasks, ids, strict=True)
        ]
        total = cfg.leaves * len(tasks) if budget is None else budget
        roots = min(cfg.roots, cfg.leaves)
        await asyncio.gather(
            *(self._branch(g.tree, g.snaps, g.task, None) for g in grows for _ in range(roots))
        )
        stalled = 0  # rounds in a row that added no leaf
        while (have := sum(len(g.tree.leaf_ids()) for g in grows)) < total:
            want = min(total - have, cfg.max_parallel)
            jobs: list[Coroutine[Any, Any, bool]] = []
            owners: list[_Growing] = []
            # after a round that grew nothing, sample afresh rather than pick the same points again
            for g, point in self._pick(grows, want) if not stalled else []:
                kind = "token" if point.at is not None else "turn"
                if point.at is not None:  # split once; every branch of the point shares the prefix
                    point = replace(point, node=self._split(g.tree, g.snaps, point.node, point.at))
                for _ in range(min(cfg.branches, want - len(jobs))):
                    jobs.append(self._branch(g.tree, g.snaps, g.task, point))
                    owners.append(g)
                    g.forks[kind] += 1
            if not jobs:  # nowhere to branch (or replay fails): sample afresh, smallest trees first
                for _ in range(want):
                    g = min(grows, key=lambda t: len(t.tree.leaf_ids()) + owners.count(t))
                    jobs.append(self._branch(g.tree, g.snaps, g.task, None))
                    owners.append(g)
            results = await asyncio.gather(*jobs)
            for g in grows:
                mine = [ok for ok, owner in zip(results, owners, strict=True) if owner is g]
                g.forks["failed"] += mine.count(False)
                if mine:
                    g.replay_works = any(mine)  # a round of failed replays: this env cannot be forked
            stalled = stalled + 1 if sum(len(g.tree.leaf_ids()) for g in grows) == have else 0
            if stalled > 1:
                raise RuntimeError(
                    f"tree rollouts stopped growing at {have} of {total} leaves: neither forks nor fresh "
                    "episodes added a leaf (every branch ended before its first turn: is generation failing?)"
                )
        return [TreeResult(g.tree, g.tree.leaves(), g.tree.generated_tokens(), g.forks) for g in grows]

    # ---- growing ----------------------------------------------------------------------
    async def _branch(
        self, tree: TrajectoryTree, snaps: dict[int, EpisodeState], task: Any, point: _Point | None
    ) -> bool:
        """Run one new branch to its end; returns False if the fork could not be replayed."""
        env = self.env_factory()
        try:
            return await self._grow(tree, snaps, task, point, env)
        finally:
            done = self.release(env)
            if inspect.isawaitable(done):
                await done

    async def _grow(
        self,
        tree: TrajectoryTree,
        snaps: dict[int, EpisodeState],
        task: Any,
        point: _Point | None,
        env: gymnasium.Env,
    ) -> bool:
        prefix: Turn | None = None
        if point is None:
            state = await self.agent.start(env, task, group_id=tree.group_id)
            if not tree.prompt_ids:
                tree.prompt_ids, tree.task_id = list(state.trajectory.prompt_ids), state.trajectory.task_id
                tree.prompt_images = state.trajectory.prompt_images
            snaps.setdefault(-1, self.agent.snapshot(state))
            parent = -1
        else:
            # A token fork's point.node is the split turn's prefix node: start before that turn.
            start, head = (point.node, None) if point.at is None else _turn_head(tree, point.node)
            try:
                state = await self.agent.fork(snaps[start], env)
            except ForkMismatch as e:
                log.warning("cannot fork by replay: %s", e)
                await arelease(env)
                return False
            parent = start
            if point.at is not None:
                parent, prefix = point.node, head
        added = False
        while not state.done:
            before = len(state.trajectory.turns)
            await self.agent.step(state, prefix=prefix)
            if len(state.trajectory.turns) > before:
                added = True
                turn = state.trajectory.turns[-1]
                if prefix is not None:  # the node holds only what this branch sampled
                    turn = _suffix(turn, len(prefix.response_ids))
                    prefix = None
                parent = tree.add(turn, parent)
                # at the turn limit a branch would end without a turn, so no new leaf: a
                # snapshot there would be picked as a fork point again and again
                if self.agent.can_step(state):
                    snaps[parent] = self.agent.snapshot(state)
        if not added:
            # the branch ended before its first turn (the engine failed): no leaf, and the
            # node it started from keeps its own outcome (parent -1 is no node at all)
            log.warning("a branch ended before its first turn: %s", state.trajectory.truncation)
            await self.agent.finish(state)
            return True
        leaf = tree.nodes[parent]
        leaf.terminal, leaf.truncation = state.trajectory.terminated, state.trajectory.truncation
        leaf.outcome_reward = state.trajectory.outcome_reward
        await self.agent.finish(state)
        return True

    def _split(self, tree: TrajectoryTree, snaps: dict[int, EpisodeState], node: int, at: int) -> int:
        """Split `node`'s turn at token `at`: the node keeps the first `at` tokens (shared,
        `continues=True`); a new child takes the rest, the observation and the old children.
        Returns the prefix node (the parent of the new branch)."""
        old = tree.nodes[node]
        if old.continues:
            raise ValueError("a prefix node is split already")
        rest = tree.add(_suffix(old.turn, at), node)
        for child in tree.nodes:
            if child.parent == node and child is not tree.nodes[rest]:
                child.parent = rest
        moved = tree.nodes[rest]
        moved.terminal, moved.outcome_reward, moved.truncation = (
            old.terminal,
            old.outcome_reward,
            old.truncation,
        )
        if node in snaps:
            snaps[rest] = snaps.pop(node)
        head = old.turn
        old.turn = Turn(
            head.response_ids[:at],
            head.response_logprobs[:at],
            policy_versions=(head.policy_versions or [-1] * len(head.response_ids))[:at],
            finish_reason=head.finish_reason,
            anchor_state_hash=head.anchor_state_hash,
            anchor_observation=head.anchor_observation,
            response_entropies=head.response_entropies[:at],
        )
        old.continues, old.terminal, old.outcome_reward, old.truncation = True, False, None, None
        return node

    # ---- choosing fork points -----------------------------------------------------------
    def _points(
        self,
        tree: TrajectoryTree,
        snaps: dict[int, EpisodeState],
        unit: Callable[[float], float] | None = None,
    ) -> list[_Point]:
        """Every place `tree` could branch from now, scored::

        score(n) = p(1 - p) + explore / (1 + leaves below n)      p = mean outcome below n

        with outcomes in [0, 1] (`unit`: default, `fork_outcome` over this tree's leaves).
        """
        cfg = self.config
        stats = _subtree_outcomes(tree, unit or _outcome_unit(cfg.fork_outcome, [tree]))
        points: list[_Point] = []
        for node in [-1, *range(len(tree.nodes))]:
            n_leaves, total, squares = stats.get(node, (0, 0.0, 0.0))
            if n_leaves == 0:
                continue
            p = total / n_leaves
            # success: TRACE's p(1 - p); scaled rewards: their variance, which is p(1 - p) for 0/1
            # outcomes and 0 where the leaves agree (p(1 - p) of a mean would call agreeing
            # leaves of 0.5 as mixed as a half-solved prefix)
            spread = p * (1 - p) if cfg.fork_outcome == "success" else max(0.0, squares / n_leaves - p * p)
            score = spread + cfg.explore / (1 + n_leaves)
            depth = len(tree.path(node)) if node >= 0 else 0
            mixed = spread > 1e-12
            if cfg.branch_at in ("turn", "both") and node in snaps and not snaps[node].done:
                points.append(_Point(node, None, score, depth, mixed))
            token_ok = cfg.branch_at in ("token", "both") and node >= 0 and not tree.nodes[node].continues
            if token_ok and _turn_head(tree, node)[0] in snaps:
                j = uncertain_token(tree.nodes[node].turn, cfg)
                if j is not None:
                    points.append(_Point(node, j, score + 1e-3, depth, mixed))
        return points

    def _pick(self, grows: list[_Growing], want: int) -> list[tuple[_Growing, _Point]]:
        """The best-scored points over all the trees, enough for `want` branches; one point per
        node per round: a token split moves the node's state after its turn to the new child,
        so a turn fork at the same node in the same round would find no state to start from.

        The trees' points compete on one scale: outcomes are made [0, 1] over all of them.
        Ties (equal scores) go, where the leaves below disagree, to the deeper point: of the
        prefixes above the same leaves the deepest is where those leaves parted, so its
        branches retry the decision that split them, sharing the most tokens. Where the leaves
        all agree there is no evidence of which turn mattered: to the shallower point, whose
        branches re-sample most of the episode, the nearest thing to the independent episode
        such a prefix deserves; the deepest turn of a failed path mostly replays its failure.
        """
        trees = [g.tree for g in grows]
        unit = _outcome_unit(self.config.fork_outcome, trees)
        ranked = [(g, q) for g in grows if g.replay_works for q in self._points(g.tree, g.snaps, unit)]
        ranked.sort(key=lambda c: (c[1].score, c[1].depth if c[1].mixed else -c[1].depth), reverse=True)
        chosen: list[tuple[_Growing, _Point]] = []
        used: set[tuple[int, int]] = set()
        for g, q in ranked:
            if len(chosen) * self.config.branches >= want:
                break
            if (id(g), q.node) in used:
                continue
            used.add((id(g), q.node))
            chosen.append((g, q))
        return chosen


def uncertain_token(turn: Turn, cfg: TreeConfig) -> int | None:
    """Where to fork inside `turn`: the token whose sampling distribution had the highest
    entropy, if at or above ``token_entropy_threshold`` (``token_signal="entropy"`` and the
    engine reported entropies); else the least likely sampled token below
    ``token_logprob_threshold``. Never the first token (a fork there is a turn fork). None:
    the policy was sure throughout."""
    ents = turn.response_entropies
    if cfg.token_signal == "entropy" and ents:
        high = [j for j in range(1, len(ents)) if ents[j] >= cfg.token_entropy_threshold]
        return max(high, key=lambda k: ents[k]) if high else None
    lps = turn.response_logprobs
    low = [j for j in range(1, len(lps)) if lps[j] < cfg.token_logprob_threshold]
    return min(low, key=lambda k: lps[k]) if low else None


def _suffix(turn: Turn, at: int) -> Turn:
    """`turn` without its first `at` response tokens (the part a token fork re-samples); every
    other field (rewards, states, the step label, timings) is the turn's own."""
    return replace(
        turn,
        response_ids=turn.response_ids[at:],
        response_logprobs=turn.response_logprobs[at:],
        observation_ids=list(turn.observation_ids),
        policy_versions=(turn.policy_versions or [-1] * len(turn.response_ids))[at:],
        response_entropies=turn.response_entropies[at:],
    )


def _turn_head(tree: TrajectoryTree, node: int) -> tuple[int, Turn]:
    """For the last part of a (possibly split) turn: the node before the turn, and the turn's
    earlier parts joined (what a branch inside this part starts from)."""
    parts = [tree.nodes[node].turn]
    parent = tree.nodes[node].parent
    while parent >= 0 and tree.nodes[parent].continues:
        parts.append(tree.nodes[parent].turn)
        parent = tree.nodes[parent].parent
    return parent, join_turns(parts[::-1]) if len(parts) > 1 else parts[0]


def _outcome_unit(kind: str, trees: list[TrajectoryTree]) -> Callable[[float], float]:
    """A leaf's outcome on [0, 1], as fork points are scored: success (reward > 0, as training
    counts it), or the reward min-max scaled over the leaves of `trees` (one scale for the
    trees that compete for one budget; all equal: 0, nothing to tell apart)."""
    if kind == "success":
        return lambda reward: 1.0 if reward > 0 else 0.0
    rewards = [t.nodes[leaf].outcome_reward or 0.0 for t in trees for leaf in t.leaf_ids()]
    lo, hi = min(rewards, default=0.0), max(rewards, default=0.0)
    if hi <= lo:
        return lambda reward: 0.0
    return lambda reward: (reward - lo) / (hi - lo)


def _subtree_outcomes(
    tree: TrajectoryTree, unit: Callable[[float], float]
) -> dict[int, tuple[int, float, float]]:
    """node (and -1, the root) → (leaves below it, sum of their outcomes, sum of their squares),
    each outcome `unit(reward)` (a leaf without one: reward 0)."""
    out: dict[int, tuple[int, float, float]] = {}
    for leaf in tree.leaf_ids():
        x = unit(tree.nodes[leaf].outcome_reward or 0.0)
        for node in [-1, *tree.path(leaf)]:
            n, s, q = out.get(node, (0, 0.0, 0.0))
            out[node] = (n + 1, s + x, q + x * x)
    return out


async def _close_env(env: gymnasium.Env) -> None:
    """Give back what the env holds (its sandbox lease, a browser) and close it."""
    await arelease(env)
    await aclose(env)
