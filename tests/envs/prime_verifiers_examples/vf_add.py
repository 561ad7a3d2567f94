"""A tool-calling verifiers environment (`vf.ToolEnv`): add two numbers with the `add` tool."""

import verifiers as vf
from datasets import Dataset


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    return a + b


def load_environment(**kwargs) -> vf.Environment:
    dataset = Dataset.from_list(
        [{"question": f"What is {a} + {b}? Use the add tool, then reply with the sum.", "answer": str(a + b)}
         for a, b in ((2, 3), (40, 2))]
    )  # fmt: skip

    def answered_with_the_tool(completion, answer) -> float:
        used = any(getattr(m, "tool_calls", None) for m in completion if m.role == "assistant")
        return float(used and completion[-1].content.strip() == answer)

    return vf.ToolEnv(
        tools=[add], eval_dataset=dataset, rubric=vf.Rubric(funcs=[answered_with_the_tool]), **kwargs
    )
