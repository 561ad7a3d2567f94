"""A small arithmetic tool suite for trainer tests: a trusted calculator handler, templated
questions, a gold policy. Imported by module path (`arith_suite:...`) in the test process and
in `arborl train` subprocesses (PYTHONPATH=tests/trainer)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from arborl.tasks import Suite, ToolDecl, ToolTask, register_suite
from arborl.trainer.local.config import TrainConfig

CALC = ToolDecl(
    name="calculator",
    description="Evaluate an arithmetic expression.",
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
    handler="arith_suite:calculator",
)


def calculator(expression: str) -> str:
    a, op, b = expression.split()
    x, y = int(a), int(b)
    return str({"+": x + y, "-": x - y, "*": x * y}[op])


def generate(n: int, seed: int) -> list[ToolTask]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b, op = rng.randint(2, 9), rng.randint(2, 9), rng.choice("+-*")
        answer = int(calculator(f"{a} {op} {b}"))
        q = f"What is {a} {op} {b}?"
        out.append(
            ToolTask(
                id=f"a{seed}-{i}",
                question=q,
                tools=(CALC,),
                builtin_tools=(),
                answer=answer,
                verifier="numeric",
            )
        )
    return out


def gold(task: ToolTask):
    expr = task.question.removeprefix("What is ").removesuffix("?")

    def policy(messages, info):
        if messages[-1]["role"] == "tool":
            return messages[-1]["content"]
        call = {"name": "calculator", "arguments": {"expression": expr}}
        return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"

    return policy


register_suite(Suite("test-arith", "arborl/Tool-v0", lambda: generate(8, 999), gold=gold), force=True)


def train_config(run_dir: Path, **sections: dict[str, Any]) -> TrainConfig:
    """A tiny trainer config on this suite; each of `sections` updates its section's keys."""
    base: dict[str, Any] = {
        "tasks": {
            "train": "arith_suite:generate",
            "train_size": 200,
            "eval_suite": "test-arith",
            "eval_size": 4,
        },
        "rollout": {"group_size": 3, "groups_per_step": 2, "max_turns": 2, "max_new_tokens": 12},
        "sft": {"steps": 3, "demos": 8, "batch_size": 4},
        "learner": {"lr": 1e-4, "micro_batch_size": 8},
        "run": {"dir": str(run_dir), "steps": 4, "eval_every": 2, "checkpoint_every": 2},
    }
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value}
    return TrainConfig.model_validate(base)
