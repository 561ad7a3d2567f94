"""A single-turn verifiers environment (`vf.SingleTurnEnv`): name a country's capital."""

import verifiers as vf
from datasets import Dataset

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Kenya": "Nairobi"}


def load_environment(**kwargs) -> vf.Environment:
    dataset = Dataset.from_list(
        [{"question": f"What is the capital of {country}? Reply with the name only.", "answer": city}
         for country, city in CAPITALS.items()]
    )  # fmt: skip

    def exact_answer(completion, answer) -> float:
        return float(completion[-1].content.strip() == answer)

    return vf.SingleTurnEnv(
        eval_dataset=dataset,
        system_prompt="Answer briefly.",
        rubric=vf.Rubric(funcs=[exact_answer]),
        **kwargs,
    )
