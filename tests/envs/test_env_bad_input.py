"""Bad input never escapes as an exception: malformed calls, junk, hostile commands and
dead sandboxes become observations the model can read, and the lease always goes back."""

from __future__ import annotations

import time
from typing import ClassVar

import gymnasium
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborl.envs import SandboxEnv, Step
from arborl.envs.parsers import MAX_CALLS_PARSED, get_parser
from arborl.tasks import ToolTask

pytestmark = pytest.mark.docker
P = get_parser("hermes")


def call(name: str, **args) -> str:
    return P.format_call(name, args)


@pytest.fixture
def code_env(make_env, leased):
    env = make_env("arborl/Code-v0", command_timeout_s=5)
    env.reset()
    yield env
    env.close()
    assert leased() == 0, "the lease was not returned"


def step_ok(env, action):
    """A step that must keep the episode going; returns (first content, info)."""
    obs, _reward, terminated, truncated, info = env.step(action)
    assert obs in env.observation_space
    assert not terminated and not truncated, obs
    return obs[0]["content"], info


@pytest.mark.parametrize(
    ("action", "words", "kind"),
    [
        (
            '<tool_call>{"name": "bash", "arguments": {"command": "ls"</tool_call>',
            ["invalid JSON", "Expected format"],
            None,
        ),
        (
            call("rm_everything", path="/"),
            ["unknown tool `rm_everything`", "bash, str_replace_editor"],
            "unknown_tool",
        ),
        (
            call("bash", command=["ls", "-la"]),
            ["invalid arguments for `bash`", "is not of type 'string'"],
            "invalid_arguments",
        ),
        (call("bash", command="ls", timeout="soon"), ["`timeout`"], "invalid_arguments"),
        (
            call("str_replace_editor", command="delete", path="a"),
            ["'delete' is not one of"],
            "invalid_arguments",
        ),
        (call("bash", command="echo a\x00b"), ["NUL byte"], "tool_error"),
        ("I think the fix is easy.", ["no tool call found", "<tool_call>"], None),
    ],
    ids=["broken-json", "unknown-tool", "wrong-type", "wrong-type-2", "bad-enum", "nul-byte", "no-call"],
)
def test_malformed_calls_become_readable_errors(code_env, action, words, kind):
    content, info = step_ok(code_env, action)
    for w in words:
        assert w in content
    assert info["format_error"] == (kind is None)
    if kind:
        assert info["tool_calls"][0]["error"] == kind and info["n_tool_errors"] == 1


def test_a_megabyte_of_junk_and_binary(code_env):
    junk = "<tool_call>{" + "\x00\x07\udc80 junk " * 150_000
    start = time.perf_counter()
    content, _info = step_ok(code_env, junk)
    assert time.perf_counter() - start < 2.0
    assert "could not read a tool call" in content and len(content) < 2000
    content, _ = step_ok(code_env, bytes(range(256)) * 4096)  # raw bytes instead of text
    assert "no tool call found" in content


def test_many_calls_at_once(code_env):
    obs, _, _, _, info = code_env.step("".join(call("bash", command=f"echo {i}") for i in range(100)))
    ran = [c for c in info["tool_calls"] if c["ok"]]
    assert len(ran) == 8 and obs[0]["content"].startswith("0\n")
    assert obs[8]["content"].startswith("Skipped: at most 8")
    assert any("too many tool calls" in e for e in info["parse_errors"])
    assert len(info["tool_calls"]) == MAX_CALLS_PARSED


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("yes | head -c 50000000", ["bytes truncated", "exit code: 0"]),
        (":(){ :|:& };:", ["exit code"]),
        ("sleep 100 & echo started", ["started", "exit code: 0"]),
        ("python3 -c 'x = bytearray(3 * 1024**3)'", ["exit code"]),
        ("head -c 400000000 /dev/zero > /tmp/fill", ["No space left on device"]),
        ("kill -9 -1; echo survived", ["exit code"]),
        ("rm -rf / --no-preserve-root 2>/dev/null; ls -A /workspace | wc -l", ["0\n"]),
        ("cat /etc/shadow", ["Permission denied"]),
        (
            "curl -sS -m 2 http://example.com || python3 -c \"import urllib.request as u; u.urlopen('http://10.0.0.1', timeout=2)\"",
            ["exit code"],
        ),
    ],
    ids=["flood", "fork-bomb", "background", "memory", "disk", "kill-all", "rm-rf", "shadow", "network"],
)
def test_hostile_commands_leave_the_episode_usable_or_end_it_cleanly(code_env, command, words):
    content, info = step_ok(code_env, call("bash", command=command))
    for w in words:
        assert w in content
    obs, _, terminated, truncated, info = code_env.step(call("bash", command="echo still here"))
    if truncated:  # only a sandbox that cannot start processes any more may end it
        assert "ran out of processes" in obs[0]["content"] and "SandboxExhausted" in info["sandbox_error"]
    else:
        assert obs[0]["content"].startswith("still here") and not terminated


def test_the_next_episode_starts_clean_after_damage(make_env):
    env = make_env("arborl/Code-v0")
    env.reset()
    env.step(call("bash", command="rm -rf /workspace/* /workspace/.git; echo junk > /tmp/x; sleep 300 &"))
    _obs, _info = env.reset()
    content, _ = step_ok(env, call("bash", command="ls /workspace; ls /tmp; pgrep sleep || echo none"))
    assert content.startswith("calc.py\ntest_calc.py\n") and "none" in content


def test_a_crashed_sandbox_ends_the_episode_cleanly(make_env, leased, env_backend):
    env = make_env("arborl/Code-v0")
    env.reset()
    sandbox = env.unwrapped.sandbox.raw
    env_backend.client.containers.get(
        sandbox.handle.id if hasattr(sandbox.handle, "id") else sandbox.id
    ).kill()
    obs, reward, terminated, truncated, info = env.step(call("bash", command="ls"))
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert "the sandbox failed" in obs[0]["content"] and "SandboxCrashed" in info["sandbox_error"]
    assert leased() == 0  # returned (as broken) at once
    obs, info = env.reset()  # a fresh sandbox
    assert step_ok(env, call("bash", command="echo alive"))[0].startswith("alive")


class FlakyEnv(SandboxEnv):
    default_task: ClassVar = {"id": "flaky"}

    async def on_reset(self, task):
        return "go"

    async def on_step(self, action):
        if action == "boom":
            raise RuntimeError("bug in the env")
        return Step("fine")


@pytest.mark.parametrize("strict", [False, True])
def test_env_bugs_end_the_episode_and_return_the_lease(env_backend, leased, strict):
    env = FlakyEnv(backend=env_backend, strict=strict)
    env.reset()
    assert leased() >= 1
    if strict:
        with pytest.raises(RuntimeError, match="bug in the env"):
            env.step("boom")
    else:
        obs, _reward, _terminated, truncated, info = env.step("boom")
        assert truncated and "failed internally" in obs[0]["content"] and "RuntimeError" in info["env_error"]
    env.close()
    assert leased() == 0
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step("fine?")


NO_SANDBOX = ToolTask(id="fuzz", question="q", builtin_tools=(), answer="x")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    action=st.one_of(
        st.text(max_size=3000),
        st.binary(max_size=3000),
        st.from_regex(r"<tool_call>.{0,200}", fullmatch=True),
    )
)
def test_fuzz_tool_env_actions(env_backend, action):
    env = gymnasium.make("arborl/Tool-v0", backend=env_backend)
    env.reset(options={"task": NO_SANDBOX})
    obs, reward, _terminated, _truncated, info = env.step(action)
    assert obs in env.observation_space
    assert isinstance(reward, float) and isinstance(info["state_hash"], str)
    assert {"turn", "tool_calls", "timing", "format_error"} <= info.keys()
