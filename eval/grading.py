"""The score of an episode its env graded: the episode's total reward (tool tasks: their
verifier; web and desktop: the env's evaluator), and success means a full score.

SWE tasks are graded by SWE-bench's semantics instead, in a sandbox of their own: the grade
is `arborl.tasks.swebench.grading`'s, the sandbox run `arborl.envs.code.grading.grade_swe`.
"""

from __future__ import annotations

#: A score at least this high counts as success (scores are in [0, 1]).
SUCCESS_SCORE = 1.0 - 1e-9


def env_score(rewards: list[float]) -> tuple[float, bool]:
    """(score, success) of an episode graded by its env: the total reward, clipped to [0, 1]."""
    score = max(0.0, min(1.0, float(sum(rewards))))
    return score, score >= SUCCESS_SCORE
