"""How much of GiGPO's step signal points the right way, on a run's stored trajectories.

    python bench/step_signal.py RUN_DIR [RUN_DIR ...] [--gamma 0.95]

For a suite whose env labels each step for an oracle (`tool-cues`: +1 a right door, -1 a
locked one; `Turn.step_label`), this recomputes GiGPO's step advantage of every labelled turn
from the paper's equations in a plain loop (Feng et al. 2025, eq. 6-7: the discounted return
from the turn, normalised by mean and std within its anchor group, the turns of one episode
group that started from the same state) and reports, per run:
- the share of labelled turns with a non-zero step advantage (a turn alone in its anchor
  group, or in a group of equal returns, gets 0);
- among those, the share whose sign agrees with the oracle's label, and the mean advantage
  of right and of wrong doors;
- for comparison, the share of labelled turns whose episode-level advantage (GRPO's: the
  episode's outcome against its group's mean, the same for every turn of it) agrees with the
  label, among those where it is not 0.

Written here, not taken from arborl's estimator, so that it checks what the estimator is
fed (returns and anchors as the trajectories hold them), not its own arithmetic.
"""

from __future__ import annotations

import argparse
import glob
import math
import statistics
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq


def step_signal(run: Path, gamma: float) -> dict[str, float]:
    agree = disagree = zero = 0
    ep_agree = ep_signed = 0
    right: list[float] = []
    wrong: list[float] = []
    for f in sorted(glob.glob(str(run / "trajectories" / "*.parquet"))):
        rows = pq.read_table(f).to_pylist()
        groups: dict[tuple[str, str], list[tuple[float, float | None]]] = defaultdict(list)
        outcomes: dict[str, list[float]] = defaultdict(list)
        for row in rows:
            outcomes[row["group_id"]].append(sum(t["reward"] for t in row["turns"]))
        for row in rows:
            episode_adv = sum(t["reward"] for t in row["turns"]) - statistics.fmean(outcomes[row["group_id"]])
            for turn in row["turns"]:
                if turn["step_label"] is not None and abs(episode_adv) > 1e-9:
                    ep_signed += 1
                    ep_agree += math.copysign(1, episode_adv) == math.copysign(1, turn["step_label"])
            turns = row["turns"]
            returns = [0.0] * len(turns)
            g = 0.0
            for t in range(len(turns) - 1, -1, -1):
                g = turns[t]["reward"] + gamma * g
                returns[t] = g
            for t, turn in enumerate(turns):
                if turn["anchor_state_hash"]:
                    groups[(row["group_id"], turn["anchor_state_hash"])].append(
                        (returns[t], turn["step_label"])
                    )
        for members in groups.values():
            scores = [s for s, _ in members]
            for s, label in members:
                if label is None:
                    continue
                if len(scores) < 2:
                    zero += 1
                    continue
                std = statistics.stdev(scores)
                adv = (s - statistics.fmean(scores)) / (std + 1e-6)
                if abs(adv) < 1e-9:
                    zero += 1
                    continue
                (right if label > 0 else wrong).append(adv)
                if math.copysign(1, adv) == math.copysign(1, label):
                    agree += 1
                else:
                    disagree += 1
    signed = agree + disagree
    return {
        "labelled turns": signed + zero,
        "with a step signal": signed / max(1, signed + zero),
        "sign agrees with the oracle": agree / max(1, signed),
        "mean advantage, right doors": statistics.fmean(right) if right else float("nan"),
        "mean advantage, locked doors": statistics.fmean(wrong) if wrong else float("nan"),
        "episode credit agrees": ep_agree / max(1, ep_signed),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--gamma", type=float, default=0.95)
    args = ap.parse_args()
    print(
        "| run | labelled turns | with a step signal | its sign agrees with the oracle | mean A_S, right "
        "| mean A_S, locked | episode credit's sign agrees |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for run in args.runs:
        r = step_signal(run, args.gamma)
        print(
            f"| {run.name} | {r['labelled turns']:.0f} | {r['with a step signal']:.0%} | "
            f"{r['sign agrees with the oracle']:.0%} | {r['mean advantage, right doors']:+.2f} | "
            f"{r['mean advantage, locked doors']:+.2f} | {r['episode credit agrees']:.0%} |"
        )


if __name__ == "__main__":
    main()
