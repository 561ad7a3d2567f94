"""Every registered arborl env passes Gymnasium's own `check_env`, built-in or user-made."""

from __future__ import annotations

import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import arborl.envs
from arborl.envs import register_env, registered_ids
from arborl.envs.code import CodeEnv
from arborl.envs.function_calling import ToolEnv

pytestmark = pytest.mark.docker
#: What `gymnasium.logger.warn` and `.error` put before their message (after a colour code).
GYMNASIUM_WARNING = r".*(WARN|ERROR): "


@pytest.mark.parametrize("env_id", registered_ids())
def test_check_env(env_id, env_backend):
    env = gymnasium.make(env_id)
    try:
        with warnings.catch_warnings():
            # A Gymnasium warning (its logger's) is a failure here. Not every warning: a
            # TextWorld env compiles its game at its first reset, and jericho warns of every
            # generated game that it is "not fully supported" (a fresh machine failed on it).
            warnings.filterwarnings("error", message=GYMNASIUM_WARNING)
            check_env(env.unwrapped)
    finally:
        env.close()


def test_the_check_fails_on_a_gymnasium_warning_and_only_on_one():
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=GYMNASIUM_WARNING)
        with pytest.raises(UserWarning, match="WARN: "):
            gymnasium.logger.warn("the observation is not within the observation space")
        warnings.warn("Game 'x.z8' is not fully supported.", UserWarning, stacklevel=1)


def test_builtin_ids_are_versioned_and_registered():
    ids = registered_ids()
    assert {"arborl/Code-v0", "arborl/Tool-v0"} <= set(ids)
    for env_id in ids:
        assert gymnasium.spec(env_id).version is not None, env_id


def test_make_takes_kwargs_and_returns_the_env_itself(env_backend):
    env = gymnasium.make("arborl/Code-v0", backend=env_backend, parser="qwen3_coder", command_timeout_s=5)
    assert isinstance(env, CodeEnv) and env.unwrapped is env
    assert env.parser.name == "qwen3_coder" and env.command_timeout_s == 5
    assert hasattr(env, "astep") and hasattr(env, "areset")
    assert isinstance(gymnasium.make("arborl/Tool-v0"), ToolEnv)


def test_register_env_refuses_to_shadow_another_env():
    with pytest.raises(ValueError, match="already registered"):
        register_env("arborl/Code-v0", "arborl.envs.function_calling.env:ToolEnv")
    register_env("arborl/Code-v0", "arborl.envs.code.env:CodeEnv")  # the same again: fine
    assert registered_ids().count("arborl/Code-v0") == 1


def test_spaces_hold_what_the_envs_return(env_backend):
    env = gymnasium.make("arborl/Tool-v0", backend=env_backend)
    obs, _info = env.reset(seed=0)
    assert obs in env.observation_space
    assert all(m.keys() == {"role", "content"} for m in obs)
    assert "\U0001f600 ünïcode" in env.action_space
    assert b"bytes" not in env.action_space
    obs, *_ = env.step("<tool_call>\U0001f600 not json</tool_call>")
    assert obs in env.observation_space


def test_seeded_episodes_repeat(env_backend):
    """Same seed, same task, same actions: same observations, rewards and state hashes."""
    parser = arborl.envs.parsers.get_parser("hermes")
    actions = [
        parser.format_call("bash", {"command": "echo hi > new.txt && ls"}),
        "no tool call here",
        parser.format_call("str_replace_editor", {"command": "view", "path": "new.txt"}),
    ]

    def run() -> list:
        env = gymnasium.make("arborl/Code-v0", backend=env_backend)
        out = [env.reset(seed=3)]
        out += [env.step(a) for a in actions]
        env.close()
        return [(o[0], o[1:-1] if len(o) == 5 else (), o[-1]["state_hash"]) for o in out]

    assert run() == run()
