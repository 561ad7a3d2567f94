"""ScienceWorld's score as arborl's reward: pure functions, no simulator.

The game reports a score in [0, 100] (the package's `ScienceWorldEnv.step` rounds the
simulator's 0-1 score to an integer percentage); a task the agent failed irrecoverably
(e.g. it focused on the wrong object) scores below zero, which the package also treats as
the end of the episode. Papers report the score clipped at 0, and a task counts as solved
when the game says it is completed with the full score of 100.
"""

from __future__ import annotations

#: The score of a solved task.
FULL_SCORE = 100


def episode_reward(score: int) -> float:
    """The reward of an episode that ended at `score`: the score clipped at 0, over 100."""
    return max(0, min(FULL_SCORE, int(score))) / FULL_SCORE


def is_success(score: int, completed: bool) -> bool:
    """Solved: the game says the task is completed, with the full score."""
    return bool(completed) and int(score) >= FULL_SCORE
