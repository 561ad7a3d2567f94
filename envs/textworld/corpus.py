"""What a model playing a TextWorld suite reads and writes, for a locally trained tokenizer
(`agents.tiny`, `model.tiny.domain_text`, bench_learning's `--tokenizer-text`)."""

from __future__ import annotations

import random

import gymnasium

from arborl.tasks.textworld.policies import walkthrough
from arborl.tasks.textworld.suites import SUITES, train_tasks

#: Seeds of the games the tokenizer reads: apart from the suites' (0..) and the training
#: streams' defaults (1000..), so no held-out game's text is read.
FIRST_SEED = 5000


def tokenizer_text(n: int = 24, suite: str = "textworld-coin", seed: int = 0) -> list[str]:
    """The system prompt, then every observation and command of `n` games of `suite`'s
    challenge played by the walkthrough with a random admissible command a third of the time
    (so refusals and dead ends are read too), at most the suite's turn budget each. Each new
    game is generated once (seconds) and cached."""
    rng = random.Random(seed)
    budget = SUITES[suite][2]
    env = gymnasium.make("arborl/TextWorld-v0")
    lines: list[str] = []
    try:
        for task in train_tasks(n, suite=suite, games=n, first_seed=FIRST_SEED):
            obs, info = env.reset(options={"task": task})
            lines += [m["content"] for m in obs]
            plan = list(walkthrough(task))
            for _ in range(budget):
                commands = info["admissible_commands"]
                if plan and (rng.random() >= 1 / 3 or not commands):
                    command = plan.pop(0)
                else:
                    command = rng.choice(commands) if commands else "look"
                lines.append(command)
                obs, _, terminated, truncated, info = env.step(f"<action>{command}</action>")
                lines += [m["content"] for m in obs]
                if terminated or truncated:
                    break
    finally:
        env.close()
    return lines
