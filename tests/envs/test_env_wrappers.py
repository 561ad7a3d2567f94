"""Wrappers: one concern each, sync and async, and they end episodes cleanly."""

from __future__ import annotations

import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from arborl.envs import FormatPenalty, StepTimeout, TokenBudget, TruncateObservation, TurnLimit
from arborl.envs.parsers import get_parser
from arborl.tasks import ToolTask

pytestmark = pytest.mark.docker
P = get_parser("hermes")
QUIZ = ToolTask(id="quiz", question="Say 4.", answer=4, verifier="numeric", builtin_tools=())


def call(name: str, **args) -> str:
    return P.format_call(name, args)


def test_turn_limit(make_env):
    env = TurnLimit(make_env("arborl/Tool-v0"), max_turns=2)
    env.reset(options={"task": QUIZ})
    assert env.step(call("nope"))[2:4] == (False, False)
    _obs, _reward, terminated, truncated, info = env.step(call("nope"))
    assert (terminated, truncated, info["truncated_by"]) == (False, True, "turn_limit")
    env.reset(options={"task": QUIZ})  # the count starts again
    assert env.turns == 0 and env.step("<answer>4</answer>")[1:3] == (1.0, True)
    with pytest.raises(ValueError):
        TurnLimit(env, 0)


async def test_token_budget_async(make_env):
    env = TokenBudget(make_env("arborl/Tool-v0"), max_tokens=10, count_tokens=lambda s: len(s.split()))
    _, info = await env.areset(options={"task": QUIZ})
    assert info["tokens_used"] == 0
    _, _, _, truncated, info = await env.astep(call("nope"))  # 6 "tokens"
    assert not truncated and info["tokens_used"] == len(call("nope").split()) == 6
    _, _, _, truncated, info = await env.astep("many words " * 5 + call("nope"))
    assert truncated and info["truncated_by"] == "token_budget" and info["tokens_used"] >= 10


def test_token_budget_can_count_observations(make_env):
    env = TokenBudget(make_env("arborl/Tool-v0"), max_tokens=10_000, count_observations=True)
    _, info = env.reset(options={"task": QUIZ})
    assert info["tokens_used"] > 20  # the system prompt and question count


def test_truncate_observation(make_env):
    env = TruncateObservation(make_env("arborl/Code-v0"), max_chars=200)
    env.reset()
    obs, *_ = env.step(call("bash", command="seq 1 2000"))
    content = obs[0]["content"]
    assert len(content) < 300 and content.startswith("1\n2\n") and content.endswith("[exit code: 0]")
    assert "characters truncated" in content


def test_format_penalty(make_env):
    env = FormatPenalty(make_env("arborl/Tool-v0"), penalty=0.25)
    env.reset(options={"task": QUIZ})
    _, reward, _, _, info = env.step("<tool_call>{broken</tool_call>")
    assert reward == -0.25 and info["format_penalty"] == 0.25
    _, reward, _, _, info = env.step(call("nope"))  # well-formed, just an unknown tool
    assert reward == 0.0 and "format_penalty" not in info


def test_step_timeout_ends_the_episode_and_frees_the_sandbox(make_env, leased):
    env = StepTimeout(make_env("arborl/Code-v0", command_timeout_s=60), timeout_s=0.5)
    env.reset()
    obs, _reward, terminated, truncated, info = env.step(call("bash", command="sleep 30"))
    assert (terminated, truncated, info["truncated_by"]) == (False, True, "step_timeout")
    assert "longer than 0.5s" in obs[0]["content"]
    assert not env.unwrapped.active
    env.reset()  # the sandbox is reset in place: the sleep is gone
    obs, *_ = env.step(call("bash", command="pgrep -c sleep || true"))
    assert obs[0]["content"].startswith("0")
    env.close()
    assert leased() == 0


def test_stacked_wrappers_pass_check_env(make_env):
    env = TurnLimit(TruncateObservation(FormatPenalty(make_env("arborl/Tool-v0")), 1000), 5)
    assert env.spec is not None and [w.name for w in env.spec.additional_wrappers] == [
        "FormatPenalty",
        "TruncateObservation",
        "TurnLimit",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*is different from the unwrapped version")
        check_env(env)


def test_wrappers_work_over_plain_gymnasium_envs():
    env = TurnLimit(gymnasium.make("CartPole-v1"), max_turns=3)
    env.reset(seed=0)
    results = [env.step(0) for _ in range(3)]
    assert results[-1][3] or results[-1][2]
