"""The trainer's task stream: deterministic by index, generator options passed through."""

from __future__ import annotations

import pytest

from arborl.tasks.stream import task_stream
from arborl.trainer.local.config import TrainConfig

TOOL_MINI = "arborl.tasks.toy.tool_mini:generate_tool_tasks"


def test_same_index_same_task_and_each_pass_is_a_new_order():
    a, b = task_stream(TOOL_MINI, 50, seed=3), task_stream(TOOL_MINI, 50, seed=3)
    assert [a(i).id for i in range(120)] == [b(i).id for i in range(120)]
    first, second = [a(i).id for i in range(50)], [a(50 + i).id for i in range(50)]
    assert sorted(first) == sorted(second) and first != second


def test_generator_options_reach_the_generator():
    only_train = task_stream(TOOL_MINI, 40, seed=0, options={"train_world": 1.0})
    only_eval = task_stream(TOOL_MINI, 40, seed=0, options={"train_world": 0.0})
    assert {only_train(i).metadata["world"] for i in range(40)} == {"train"}
    assert {only_eval(i).metadata["world"] for i in range(40)} == {"eval"}
    with pytest.raises(TypeError, match="no_such_option"):
        task_stream(TOOL_MINI, 5, seed=0, options={"no_such_option": 1})
    with pytest.raises(ValueError, match="fixed suite"):
        task_stream("suite:tool-mini", 5, seed=0, options={"train_world": 1.0})
    cfg = TrainConfig.model_validate({"tasks": {"train_options": {"train_world": 0.5}}})
    assert cfg.tasks.train_options == {"train_world": 0.5}


def test_the_command_line_adds_generator_options():
    from arborl.cli.config import load_config, section

    cfg = load_config(["+tasks.train_options.train_world=0.0"], "train")
    assert TrainConfig.model_validate({"tasks": section(cfg, "tasks")}).tasks.train_options == {
        "train_world": 0.0
    }
