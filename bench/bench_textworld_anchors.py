"""How often TextWorld observations recur across the episodes of a rollout group (the anchor
states GiGPO groups steps by, issue 34).

Per game, one group of 8 rollouts of a noisy walkthrough policy: each turn, with probability
1 - eps the next command of TextWorld's own winning policy from the current state
(`policy_commands`), else a random admissible command; at most the suite's turn budget. Each
step's anchor is the state it was taken from, keyed two ways: the observation text as
`arborl/TextWorld-v0` shows it (feedback + admissible commands), and the env's `state_hash`
fields (room description, inventory, score). Reported: steps, distinct anchors, the share of
steps whose anchor is also reached by another rollout of the group (a step-level group of
size >= 2 across episodes), and the mean steps per anchor.

Writes bench/results/textworld-anchors.md.

    python bench/bench_textworld_anchors.py [--games 2] [--group 8]
"""

from __future__ import annotations

import argparse
import random
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import textworld

from arborl.envs.textworld import render
from arborl.envs.textworld.process import ALWAYS
from arborl.tasks import get_suite
from arborl.tasks.textworld import TextWorldTask, ensure_game

RESULTS = Path(__file__).with_name("results")
INFOS = textworld.EnvInfos(**dict.fromkeys((*ALWAYS, "admissible_commands", "policy_commands"), True))
KEYS: dict[str, Callable[[Any], Any]] = {
    "observation text": lambda s: render(s, ("admissible_commands",)),
    "state_hash fields": lambda s: (s["description"], s["inventory"], s["score"]),
}


def rollout(game: str, eps: float, turns: int, rng: random.Random) -> tuple[list[Any], bool]:
    """The states each step was taken from, and whether the game was won."""
    env = textworld.start(game, request_infos=INFOS)
    state, done, anchors = env.reset(), False, []
    for _ in range(turns):
        if done:
            break
        anchors.append(state)
        policy = state["policy_commands"] or []
        command = policy[0] if policy and rng.random() >= eps else rng.choice(state["admissible_commands"])
        state, _, done = env.step(command)
    env.close()
    return anchors, bool(state["won"])


def group_stats(group: list[list[Any]], key: Callable[[Any], Any]) -> tuple[int, int, int]:
    """(steps, distinct anchors, steps whose anchor another rollout of the group also reached)."""
    seen_by: dict[Any, set[int]] = defaultdict(set)
    for i, states in enumerate(group):
        for s in states:
            seen_by[key(s)].add(i)
    steps = sum(len(states) for states in group)
    shared = sum(len(seen_by[key(s)]) >= 2 for states in group for s in states)
    return steps, len(seen_by), shared


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--games", type=int, default=2, help="games per suite (seeds 0..N-1)")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    games = 1 if args.quick else args.games
    rows = []
    for name in ("textworld-coin", "textworld-cooking"):
        suite = get_suite(name)
        tasks: list[TextWorldTask] = suite.tasks()[:games]
        for eps in (0.1, 0.3, 1.0):
            groups = []
            for task in tasks:
                rng = random.Random(f"{task.id}:{eps}")
                runs = [rollout(str(ensure_game(task)), eps, suite.max_turns, rng) for _ in range(args.group)]
                groups.append(([states for states, _ in runs], sum(won for _, won in runs)))
            for key_name, key in KEYS.items():
                stats = [group_stats(g, key) for g, _ in groups]
                steps, distinct, shared = (sum(x) for x in zip(*stats, strict=True))
                won = sum(w for _, w in groups)
                rows.append(
                    f"| {name} | {eps:g} | {key_name} | {won}/{len(groups) * args.group} | {steps} "
                    f"| {distinct} | {shared / steps:.0%} | {steps / distinct:.1f} |"
                )
                print(rows[-1], flush=True)
    text = (
        f"""# TextWorld anchor states across a rollout group

`python bench/bench_textworld_anchors.py{" --quick" if args.quick else ""}`: per suite, its first {games} game(s), one group of
{args.group} rollouts each of a noisy walkthrough policy (eps: the chance of a random admissible
command instead of TextWorld's own next winning command), at most the suite's turn budget.

| suite | eps | anchor key | won | steps | distinct anchors | steps whose anchor another rollout reached | steps per anchor |
|---|---:|---|---:|---:|---:|---:|---:|
"""
        + "\n".join(rows)
        + "\n"
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "textworld-anchors.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
