"""A number-guessing game as an arborl environment, shipped as a package.

`register` is this package's `arborl.envs` entry point (pyproject.toml): arborl calls it the
first time it resolves an env id or a suite, so it only names things (``"module:attribute"``
strings, imported when used) and stays cheap.
"""

from __future__ import annotations

ENV_ID = "example/Guess-v0"
SUITE = "guess-mini"


def register() -> None:
    """Register the env id and its suite with arborl."""
    from arborl.envs import register_env
    from arborl.tasks import Suite, register_suite

    register_env(ENV_ID, "arborl_example_env.env:GuessEnv")
    register_suite(
        Suite(
            SUITE,
            ENV_ID,
            loader="arborl_example_env.game:guess_mini",
            description="guess a number from 1 to 100 in 7 tries, told higher or lower after each",
            gold="arborl_example_env.game:bisecting_policy",
            empty="arborl_example_env.game:giving_up_policy",
            max_turns=8,
            tags=("example", "multi-turn"),
        )
    )
