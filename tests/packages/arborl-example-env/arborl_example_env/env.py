"""`example/Guess-v0`: guess a secret number; after each guess the env says higher or lower."""

from __future__ import annotations

from typing import Any, ClassVar

from arborl.envs import Step, TextEnv

from .game import GuessTask, last_number


class GuessEnv(TextEnv):
    """Guess a secret number, told higher or lower after each try."""

    task_type: ClassVar[type[GuessTask]] = GuessTask
    default_task: ClassVar[GuessTask] = GuessTask(id="guess-42", secret=42)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.guesses = 0

    async def on_reset(self, task: GuessTask) -> str:
        self.guesses = 0
        return (
            f"I am thinking of a whole number from 1 to {task.high}. Guess it: reply with one number. "
            f"After each guess I say Higher or Lower; you have {task.max_guesses} guesses. "
            "A reply without a number gives the game up."
        )

    async def on_step(self, action: str) -> Step:
        task: GuessTask = self.task
        guess = last_number(action)
        if guess is None:
            return Step(
                f"No number: you gave up. It was {task.secret}.", terminated=True, info={"guess": None}
            )
        self.guesses += 1
        info = {"guess": guess, "guesses": self.guesses}
        if guess == task.secret:
            return Step(f"Correct, it is {guess}!", reward=1.0, terminated=True, info=info)
        if self.guesses >= task.max_guesses:
            return Step(f"No guesses left. It was {task.secret}.", terminated=True, info=info)
        return Step("Higher." if guess < task.secret else "Lower.", info=info)
