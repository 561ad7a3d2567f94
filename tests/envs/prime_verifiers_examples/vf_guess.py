"""A multi-turn verifiers environment (`vf.MultiTurnEnv`): guess a number, told higher or lower."""

import verifiers as vf
from datasets import Dataset


def last_number(text):
    digits = "".join(c if c.isdigit() else " " for c in text or "").split()
    return int(digits[-1]) if digits else None


class GuessEnv(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        guess = last_number(messages[-1].content)
        secret = int(state["answer"])
        if guess is None:
            state["final_env_response"] = [vf.UserMessage(content="No number: game over.")]
            return state["final_env_response"]
        return [vf.UserMessage(content="Higher." if guess < secret else "Lower.")]

    @vf.stop
    async def guessed(self, state) -> bool:
        return bool(state["trajectory"]) and last_number(
            state["trajectory"][-1]["completion"][-1].content
        ) == int(state["answer"])


def load_environment(max_turns: int = 7, **kwargs) -> vf.Environment:
    dataset = Dataset.from_list(
        [
            {"question": "Guess my number from 1 to 100. Reply with one number.", "answer": str(n)}
            for n in (1, 37, 100)
        ]
    )

    def solved(state) -> float:
        last = state["trajectory"][-1]["completion"][-1].content if state["trajectory"] else ""
        return float(last_number(last) == int(state["answer"]))

    return GuessEnv(eval_dataset=dataset, rubric=vf.Rubric(funcs=[solved]), max_turns=max_turns, **kwargs)
