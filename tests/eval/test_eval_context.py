"""`model.context`: what `arborl eval` does when an episode outgrows `model.max_context_tokens`,
as the training agent's `rollout.context` does (sokoban-6x6: verl-agent's prompt, some 1,100
tokens of the tiny tokenizer a turn, outgrows 2048 tokens at the third turn)."""

from __future__ import annotations

import asyncio
import json

import pytest

from arborl.eval.config import EvalConfig
from arborl.eval.runner import run_eval


def turns_played(context: str, tiny_model, tmp_path) -> int:
    run = tmp_path / context
    cfg = EvalConfig.model_validate(
        {
            "suite": "sokoban-6x6",
            "agent": "model",
            "limit": 1,
            "max_turns": 3,
            "model": {
                "path": str(tiny_model),
                "max_new_tokens": 8,
                "max_context_tokens": 2048,
                "context": context,
            },
            "run": {"dir": str(run), "resume": False},
            "report": False,
        }
    )
    asyncio.run(run_eval(cfg))
    (transcript,) = (run / "instances").glob("*/sample-0/transcript.json")
    return sum(m["role"] == "assistant" for m in json.loads(transcript.read_text()))


@pytest.mark.slow
def test_a_sliding_window_plays_on_where_truncate_ends_the_episode(tiny_model, tmp_path):
    assert turns_played("truncate", tiny_model, tmp_path) < 3
    assert turns_played("sliding_window", tiny_model, tmp_path) == 3
