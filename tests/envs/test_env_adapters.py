"""4-tuple envs (rLLM / OSWorld / R2E-Gym convention) behind the arborl Gymnasium contract."""

from __future__ import annotations

import asyncio

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from arborl.envs import register_env
from arborl.envs.adapters import FourTupleAdapter


class OSWorldLike:
    """reset(task_config=...) -> obs (a dict); async step -> (obs, reward, done, info)."""

    def __init__(self) -> None:
        self.task_config = None

    def reset(self, task_config=None):
        self.task_config = task_config
        return {"screenshot": "<png bytes>", "instruction": task_config["instruction"] if task_config else ""}

    async def step(self, action):
        await asyncio.sleep(0)
        done = action == "DONE"
        return {"screenshot": "<png>", "last": action}, float(done), done, {"action_ok": True}

    def close(self):
        pass


def test_done_splits_into_terminated_and_truncated():
    env = gymnasium.make("arborl-test/Guess-v0")
    obs, _ = env.reset(options={"task": {"id": "g1", "secret": 3, "max_tries": 2}})
    assert obs == ({"role": "user", "content": "Guess my number between 1 and 10."},)
    assert env.step("5")[1:4] == (0.0, False, False)
    obs, reward, terminated, truncated, info = env.step("6")  # out of tries: done + TimeLimit.truncated
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert "TimeLimit.truncated" not in info["inner_info"]
    env.reset(options={"task": {"id": "g2", "secret": 3}})
    assert env.step(" 3 ")[1:4] == (1.0, True, False)
    env.close()


def test_env_factory_makes_one_inner_env_per_task_and_closes_the_old():
    env = gymnasium.make("arborl-test/Guess-v0")
    env.reset(options={"task": {"id": "a", "secret": 1}})
    first = env.unwrapped.inner
    env.reset(options={"task": {"id": "b", "secret": 2}})
    assert env.unwrapped.inner is not first and first.closed == 1
    assert env.step("2")[1] == 1.0


async def test_task_as_a_reset_keyword_and_async_inner_methods():
    inner = OSWorldLike()
    env = FourTupleAdapter(inner, reset_task_kwarg="task_config", obs_to_text=lambda o: f"screen; {o}")
    obs, _ = await env.areset(options={"task": {"id": "w", "instruction": "open the terminal"}})
    assert (
        inner.task_config["instruction"] == "open the terminal" and "open the terminal" in obs[0]["content"]
    )
    obs, reward, terminated, truncated, info = await env.astep("DONE")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["inner_info"] == {"action_ok": True} and "DONE" in obs[0]["content"]
    # check through a registered id: its spec says the env is nondeterministic (timing in info)
    register_env(
        "arborl-test/OSWorldLike-v0",
        FourTupleAdapter,
        kwargs={"env": OSWorldLike(), "reset_task_kwarg": "task_config"},
    )
    check_env(gymnasium.make("arborl-test/OSWorldLike-v0"))


def test_an_adapter_needs_an_env():
    with pytest.raises(ValueError, match="needs an inner"):
        FourTupleAdapter()
