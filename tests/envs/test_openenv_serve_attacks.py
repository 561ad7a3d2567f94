"""The attacks on `arborl envs serve` of issue 31, each run as a client would run it against a
real server: a task whose tool handler runs on the host, a task whose `repo_path` reads the
host, no token or a wrong one, a bind beyond loopback. Before task ids and tokens, the first
ran `id` on the host as root, the second read a host directory, any client was served and
`--host 0.0.0.0` listened to the network."""

from __future__ import annotations

import json
import secrets
import signal
import time

import pytest
from served import Served

pytest.importorskip("openenv.core", reason="OpenEnv is in the `ecosystem` extra")

HANDLER_TASK = {
    "kind": "tool",
    "id": "attack/handler",
    "question": "Who runs this server?",
    "answer": "root",
    "tools": [
        {
            "name": "sh",
            "handler": "subprocess:getoutput",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        }
    ],
}
SH_CALL = '<tool_call>{"name": "sh", "arguments": {"cmd": "id; head -c 100 /etc/shadow"}}</tool_call>'


def last_message(result) -> str:
    return result.observation["messages"][-1]["content"]


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory, bwrap_backend):
    server = Served(
        ["arborl/Tool-v0", "--suite", "tool-mini", "--env-kwargs", '{"backend": "bwrap"}'],
        tmp_path_factory.mktemp("tool-server"),
    )
    yield server.wait()
    server.stop()


@pytest.fixture(scope="module")
def code_server(tmp_path_factory, bwrap_backend):
    server = Served(
        ["arborl/Code-v0", "--suite", "swe-mini", "--env-kwargs", '{"backend": "bwrap"}'],
        tmp_path_factory.mktemp("code-server"),
    )
    yield server.wait()
    server.stop()


def attempt(server: Served, reset: dict, action: str) -> tuple[list[str], str]:
    """Reset with `reset`, then step `action`, as OpenEnv's client; what came back, and the
    server's refusal (empty when it served the request)."""
    from openenv.core.generic_client import GenericEnvClient

    seen: list[str] = []
    with GenericEnvClient(base_url=server.url()).sync() as env:
        try:
            seen.append(last_message(env.reset(**reset)))
            seen.append(last_message(env.step({"text": action})))
        except RuntimeError as e:  # the server's error message
            return seen, str(e)
    return seen, ""


@pytest.mark.slow
def test_a_task_with_a_host_handler_is_refused(tool_server):
    seen, refusal = attempt(tool_server, {"task": HANDLER_TASK}, SH_CALL)
    assert not any("uid=" in s for s in seen), f"the host ran the client's handler: {seen}"
    assert "`task` must be a task id" in refusal and "'tool-mini/arith-000'" in refusal
    # nor as other fields of the reset, nor over plain HTTP
    for extra in ({"handler": "subprocess:getoutput"}, {"tools": HANDLER_TASK["tools"]}, {"module": "os"}):
        seen, refusal = attempt(tool_server, {"task": "tool-mini/arith-000", **extra}, SH_CALL)
        assert not any("uid=" in s for s in seen) and f"it got {next(iter(extra))}" in refusal, (
            seen,
            refusal,
        )
    status, body = tool_server.http("POST", "/reset", {"task": HANDLER_TASK})
    assert status == 400 and "`task` must be a task id" in body["detail"]
    # a task id of the suite still works, through both
    seen, refusal = attempt(tool_server, {"task": "tool-mini/arith-000", "seed": 3}, "no tool call")
    assert not refusal and seen[0] == "What is 73 + 86?"
    status, body = tool_server.http("POST", "/reset", {"task": "tool-mini/arith-000"})
    assert status == 200 and body["observation"]["messages"][-1]["content"] == "What is 73 + 86?"


@pytest.mark.slow
def test_a_task_reading_a_host_path_is_refused(code_server, tmp_path):
    secret = secrets.token_hex(16)
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "secret.txt").write_text(secret)
    task = {
        "kind": "code",
        "id": "attack/repo-path",
        "problem_statement": "look",
        "repo_path": str(tmp_path / "host"),
    }
    cat = '<tool_call>{"name": "bash", "arguments": {"command": "cat /workspace/secret.txt"}}</tool_call>'
    seen, refusal = attempt(code_server, {"task": task}, cat)
    assert not any(secret in s for s in seen), "the client read a host directory through repo_path"
    assert "`task` must be a task id" in refusal and "host path" in refusal
    seen, refusal = attempt(code_server, {"task": "attack/repo-path"}, cat)
    assert "has no task 'attack/repo-path'" in refusal


@pytest.mark.slow
def test_no_token_or_a_wrong_one_is_refused(tool_server):
    from openenv.core.generic_client import GenericEnvClient
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    wrong = secrets.token_urlsafe(32)
    for url in (tool_server.url(token=""), tool_server.url(token=wrong)):
        with pytest.raises(ConnectionError, match="HTTP 403"), GenericEnvClient(base_url=url).sync() as env:
            env.reset()
    ws = f"ws://127.0.0.1:{tool_server.port}/ws"
    for header in ({}, {"Authorization": f"Bearer {wrong}"}, {"Authorization": tool_server.token}):
        with pytest.raises(InvalidStatus, match="403"), connect(ws, additional_headers=header):
            pass
    with connect(ws, additional_headers={"Authorization": f"Bearer {tool_server.token}"}) as sock:
        sock.send(json.dumps({"type": "reset", "data": {"task": "tool-mini/arith-001"}}))
        assert json.loads(sock.recv(timeout=60))["type"] == "observation"
    calls = [("POST", "/reset", {}), ("POST", "/step", {"action": {"text": "hi"}}), ("GET", "/state", None),
             ("GET", "/schema", None), ("GET", "/metadata", None), ("GET", "/docs", None),
             ("GET", "/openapi.json", None), ("POST", "/mcp", {"jsonrpc": "2.0", "method": "tools/list", "id": 1})]  # fmt: skip
    for method, path, body in calls:
        for token in ("", wrong):
            status, answer = tool_server.http(method, path, body, token=token)
            assert status == 401 and "Authorization: Bearer" in answer["detail"], (method, path, status)
    assert tool_server.http("GET", "/health", token="")[0] == 200  # probes need no token
    assert tool_server.http("GET", "/schema")[0] == 200


@pytest.mark.slow
def test_a_bind_beyond_loopback_needs_the_opt_in(tmp_path, bwrap_backend):
    args = ["arborl/Tool-v0", "--suite", "tool-mini", "--host", "0.0.0.0"]
    server = Served(args, tmp_path)
    try:
        deadline = time.monotonic() + 120
        while server.proc.poll() is None and time.monotonic() < deadline:
            assert not _listening(server), "the server listens on 0.0.0.0 without --allow-remote"
            time.sleep(0.5)
        assert server.proc.returncode == 2, server.text()
        assert "--allow-remote" in server.text()
    finally:
        server.stop(signal.SIGKILL)
    remote = Served([*args, "--allow-remote"], tmp_path).wait()
    try:  # the opt-in opens the address, not the door: the token still applies
        assert remote.http("POST", "/reset", {"task": "tool-mini/arith-000"}, token="")[0] == 401
        assert remote.http("POST", "/reset", {"task": "tool-mini/arith-000"})[0] == 200
    finally:
        remote.stop()


def _listening(server: Served) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", server.port)) == 0


def test_where_the_token_comes_from(tmp_path):
    from arborl.envs.openenv_access import AccessError, load_token

    path = tmp_path / "token"
    token, source = load_token(path, environ={})
    assert path.stat().st_mode & 0o777 == 0o600 and path.read_text().strip() == token and "new" in source
    assert load_token(path, environ={"ARBORL_SERVE_TOKEN": "x" * 40}) == (token, f"read from {path}")
    path.chmod(0o644)
    with pytest.raises(AccessError, match="chmod 600"):
        load_token(path, environ={})
    assert load_token(None, environ={"ARBORL_SERVE_TOKEN": "y" * 40})[0] == "y" * 40
    for weak in ("short", "has a space in it, twenty+"):
        with pytest.raises(AccessError, match="at least 16 printable"):
            load_token(None, environ={"ARBORL_SERVE_TOKEN": weak})
    fresh = {load_token(None, environ={})[0] for _ in range(3)}
    assert len(fresh) == 3 and all(len(t) >= 40 for t in fresh)


def test_which_addresses_are_loopback():
    from arborl.envs.openenv_access import AccessError, check_bind, is_loopback, presented_token

    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("")
    with pytest.raises(AccessError, match="--allow-remote"):
        check_bind("0.0.0.0", allow_remote=False)
    check_bind("0.0.0.0", allow_remote=True)
    # the two forms a client can send: Bearer, and Basic (a URL's user:password)
    assert presented_token([(b"authorization", b"Bearer abc")]) == b"abc"
    assert presented_token([(b"Authorization", b"Basic YXJib3JsOmFiYw==")]) == b"abc"  # arborl:abc
    assert presented_token([(b"authorization", b"Basic !!")]) is None
    assert presented_token([(b"authorization", b"abc")]) is None and presented_token([]) is None


@pytest.mark.slow
def test_arborls_own_openenv_adapter_carries_the_token(tool_server):
    """`OpenEnvEnv(base_url=...)` takes the same URL as OpenEnv's client (docs/envs.md)."""
    from arborl.envs.openenv_client import OpenEnvEnv, OpenEnvTask

    env = OpenEnvEnv(base_url=tool_server.url(), action_field="text")
    try:
        obs, _ = env.reset(options={"task": OpenEnvTask(id="t", reset={"task": "tool-mini/arith-000"})})
        assert "What is 73 + 86?" in obs[-1]["content"]
        obs, reward, terminated, _, _ = env.step("The answer is 159.")
        assert reward == 1.0 and terminated
    finally:
        env.close()
    refused = OpenEnvEnv(base_url=tool_server.url(token=secrets.token_urlsafe(32)), action_field="text")
    try:
        with pytest.raises(Exception, match="403"):
            refused.reset()
    finally:
        refused.close()
