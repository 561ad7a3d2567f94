"""How often Sokoban states recur across a GRPO group (issue 34: GiGPO's anchor groups).

    python bench/sokoban_anchors.py [--levels 50] [--group 8] [--eps 0.1,0.25,0.5]

For each of the first `--levels` rooms of sokoban-6x6, `--group` episodes of a noisy solver
run on arborl/Sokoban-v0: each turn it plays a random direction with probability eps, else
the first move of a shortest solution from where it stands (`solver.solve`; a random
direction when the room can no longer be solved). A turn's anchor is the state it starts
from (`info["state_hash"]` of reset, then of the previous step: the grid, as verl-agent's
GiGPO anchors on the observation). Per group, turns with equal anchors form an anchor group.
Reported per eps:

- recurring: the share of turns whose anchor occurs in another episode of the group
  (non-singleton across episodes), with and without each episode's first turn (the room's
  start, shared by all episodes by construction);
- mean anchor-group size, over all anchor groups and over those of two turns or more;
- success: the share of episodes that solved their room in verl-agent's 15 turns.

Writes bench/results/sokoban-anchors.md.
"""

from __future__ import annotations

import argparse
import random
from collections import defaultdict
from pathlib import Path

import gymnasium

import arborl.envs  # noqa: F401 - registers the ids
from arborl.tasks import get_suite
from arborl.tasks.sokoban.game import DIRECTIONS
from arborl.tasks.sokoban.solver import solve
from arborl.tasks.sokoban.task import SokobanTask

OUT = Path(__file__).resolve().parent / "results" / "sokoban-anchors.md"


def episode(env: gymnasium.Env, task: SokobanTask, eps: float, rng: random.Random) -> tuple[list[str], bool]:
    """The anchors of an episode's turns, and whether it solved the room."""
    _, info = env.reset(options={"task": task})
    anchors, won = [], False
    for _ in range(task.max_steps):
        anchors.append(info["state_hash"])
        plan = solve(env.unwrapped.board) if rng.random() >= eps else None
        move = plan[0] if plan else rng.choice(list(DIRECTIONS))
        _, _, terminated, truncated, info = env.step(f"<think>.</think><action>{move.lower()}</action>")
        if terminated or truncated:
            won = bool(info["won"])
            break
    return anchors, won


def group_stats(trajectories: list[list[str]]) -> dict[str, float]:
    where: dict[str, set[int]] = defaultdict(set)
    size: dict[str, int] = defaultdict(int)
    for i, anchors in enumerate(trajectories):
        for a in anchors:
            where[a].add(i)
            size[a] += 1
    turns = [(a, t) for anchors in trajectories for t, a in enumerate(anchors)]
    later = [(a, t) for a, t in turns if t > 0]
    return {
        "turns": len(turns),
        "recurring": sum(len(where[a]) > 1 for a, _ in turns),
        "later": len(later),
        "later_recurring": sum(len(where[a]) > 1 for a, _ in later),
        "groups": len(size),
        "group_turns": sum(size.values()),
        "multi_groups": sum(s > 1 for s in size.values()),
        "multi_turns": sum(s for s in size.values() if s > 1),
    }


def measure(tasks: list[SokobanTask], group: int, eps: float, seed: int) -> dict[str, float]:
    env = gymnasium.make("arborl/Sokoban-v0")
    total: dict[str, float] = defaultdict(float)
    wins = episodes = 0
    for k, task in enumerate(tasks):
        rng = random.Random(f"{seed}:{eps}:{k}")
        runs = [episode(env, task, eps, rng) for _ in range(group)]
        wins += sum(w for _, w in runs)
        episodes += len(runs)
        for key, v in group_stats([a for a, _ in runs]).items():
            total[key] += v
    env.close()
    return {
        "recurring": total["recurring"] / total["turns"],
        "later_recurring": total["later_recurring"] / max(total["later"], 1),
        "mean_group": total["group_turns"] / total["groups"],
        "mean_multi_group": total["multi_turns"] / max(total["multi_groups"], 1),
        "turns_per_episode": total["turns"] / episodes,
        "success": wins / episodes,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", type=int, default=50)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--eps", default="0.1,0.25,0.5,1.0")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    tasks = get_suite("sokoban-6x6").tasks()[: args.levels]
    lines = [
        f"# Sokoban anchor groups ({args.levels} sokoban-6x6 rooms, groups of {args.group}, noisy solver)",
        "",
        "| eps | turns recurring in another episode | same, first turn excluded | mean anchor-group size "
        "| mean size of groups of 2+ | turns per episode | success |",
        "|---|---|---|---|---|---|---|",
    ]
    for eps in (float(e) for e in args.eps.split(",")):
        m = measure(tasks, args.group, eps, args.seed)
        lines.append(
            f"| {eps:g} | {m['recurring']:.1%} | {m['later_recurring']:.1%} | {m['mean_group']:.2f} "
            f"| {m['mean_multi_group']:.2f} | {m['turns_per_episode']:.1f} | {m['success']:.0%} |"
        )
        print(lines[-1], flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
