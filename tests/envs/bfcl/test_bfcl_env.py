"""`arborl/BFCL-v0`: arborl's parser reads the calls, BFCL's backends run them (fresh per
episode), bfcl-eval's checker scores; bad input is the agent's mistake, a broken backend an
infrastructure error."""

from __future__ import annotations

import asyncio

import gymnasium
import pytest

import arborl.envs  # noqa: F401
from arborl.envs.bfcl import BfclEnv
from arborl.tasks.bfcl.backends import BackendError
from arborl.tasks.bfcl.data import load_category
from arborl.tasks.bfcl.policies import TURN_DONE, gold_calls, tool_calls


def _env() -> BfclEnv:
    env = gymnasium.make("arborl/BFCL-v0")
    assert isinstance(env, BfclEnv)
    return env


def test_single_turn_reply_is_scored_by_bfcls_checker() -> None:
    env, task = _env(), load_category("parallel", 1)[0]
    _, info = env.reset(options={"task": task})
    assert {t["function"]["name"] for t in info["tools"]} == {f["name"] for f in task.entry["function"]}
    _, reward, terminated, _, info = env.step(tool_calls(gold_calls(task)))
    assert (reward, terminated, info["bfcl_valid"]) == (1.0, True, True)
    env.reset(options={"task": task})
    _, reward, terminated, _, info = env.step(tool_calls(gold_calls(task)[:1]))
    assert (reward, terminated) == (0.0, True) and info["bfcl_error_type"]


@pytest.mark.parametrize("reply", ["<tool_call>{not json</tool_call>", "\x00" * 100, "plain prose"])
def test_an_unreadable_reply_scores_zero_without_an_exception(reply: str) -> None:
    env = _env()
    env.reset(options={"task": load_category("simple_python", 1)[0]})
    _, reward, terminated, truncated, info = env.step(reply)
    assert (reward, terminated, truncated, info["bfcl_valid"]) == (0.0, True, False, False)


def _multi_turn_task():
    return load_category("multi_turn_base", 1)[0]


def test_multi_turn_calls_run_on_the_episodes_own_backends() -> None:
    env, other, task = _env(), _env(), _multi_turn_task()
    env.reset(options={"task": task})
    other.reset(options={"task": task})
    obs, _, terminated, _, info = env.step(tool_calls([("mkdir", {"dir_name": "mine"})]))
    assert obs[0]["role"] == "tool" and not terminated and info["bfcl_turn"] == 0
    obs, *_ = env.step(tool_calls([("ls", {})]))
    assert "mine" in obs[0]["content"]
    obs, *_ = other.step(tool_calls([("ls", {})]))
    assert "mine" not in obs[0]["content"]
    obs, _, terminated, _, info = env.step(TURN_DONE)  # ends turn 0: turn 1's message
    assert obs[0]["role"] == "user" and info["bfcl_turn"] == 1 and not terminated


def test_a_private_or_unknown_method_named_by_the_agent_is_refused() -> None:
    env, task = _env(), _multi_turn_task()
    env.reset(options={"task": task})
    fs = env.unwrapped._backends.instances["GorillaFileSystem"]
    before = repr(vars(fs))
    for name in ("_load_scenario", "__init__", "__setattr__", "root", "open", "eval"):
        obs, *_ = env.step(tool_calls([(name, {"scenario": {}})]))
        assert obs[0]["content"] == f"Error during execution: name '{name}' is not defined"
    assert repr(vars(fs)) == before


def test_a_multi_turn_run_is_scored_after_its_last_turn() -> None:
    env, task = _env(), _multi_turn_task()
    env.reset(options={"task": task})
    reward, terminated = 0.0, False
    for _ in task.turns:  # abstaining on every turn
        _, reward, terminated, _, info = env.step(TURN_DONE)
    assert terminated and reward == 0.0 and info["bfcl_error_type"] == "multi_turn:empty_turn_model_response"


def test_more_than_twenty_steps_in_a_turn_is_force_terminated() -> None:
    env = _env()
    env.reset(options={"task": _multi_turn_task()})
    for _ in range(20):
        *_, terminated, _, _ = env.step(tool_calls([("pwd", {})]))
        assert not terminated
    _, reward, terminated, _, info = env.step(tool_calls([("pwd", {})]))
    assert (reward, terminated, info["bfcl_error_type"]) == (0.0, True, "multi_turn:force_terminated")


def test_a_backend_that_cannot_load_is_an_infrastructure_error() -> None:
    task = _multi_turn_task()
    broken = task.model_copy(update={"entry": {**task.entry, "involved_classes": ["NoSuchAPI"]}})
    with pytest.raises(BackendError, match="NoSuchAPI"):
        _env().reset(options={"task": broken})


def test_async_episodes_do_not_share_state() -> None:
    task = _multi_turn_task()

    async def episode(name: str) -> str:
        env = _env()
        await env.areset(options={"task": task})
        await env.astep(tool_calls([("mkdir", {"dir_name": name})]))
        obs, *_ = await env.astep(tool_calls([("ls", {})]))
        return obs[0]["content"]

    async def both() -> list[str]:
        return await asyncio.gather(episode("a_dir"), episode("b_dir"))

    a, b = asyncio.run(both())
    assert "a_dir" in a and "b_dir" not in a and "b_dir" in b and "a_dir" not in b
