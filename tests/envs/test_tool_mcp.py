"""`arborl/Tool-v0` with tools from a real MCP server (written with `fastmcp`, served over
Streamable HTTP on loopback in a subprocess), reached through the `mcp` package's client."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import gymnasium
import pytest
from arborl_require import unavailable

from arborl.envs.function_calling.mcp import MCPServerConfig
from arborl.envs.parsers import get_parser

pytestmark = pytest.mark.slow
P = get_parser("hermes")

SERVER = '''
import sys
from fastmcp import Context, FastMCP

mcp = FastMCP("calc")


@mcp.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@mcp.tool
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


@mcp.tool
async def remember(item: str, ctx: Context) -> str:
    """Keep an item in this session's memory; returns all kept so far."""
    kept = [*((await ctx.get_state("kept")) or []), item]
    await ctx.set_state("kept", kept)
    return ",".join(kept)


mcp.run(transport="http", host="127.0.0.1", port=int(sys.argv[1]), show_banner=False)
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mcp_url(tmp_path_factory):
    try:
        import fastmcp  # noqa: F401
        import mcp  # noqa: F401
    except ImportError as e:
        unavailable("mcp", f"{e}: pip install -e '.[mcp]' (and fastmcp for the tests)")
    workdir = tmp_path_factory.mktemp("mcp")
    (workdir / "server.py").write_text(SERVER)
    port = free_port()
    log = (workdir / "log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "server.py", str(port)], cwd=workdir, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (workdir / "log").read_text()
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert time.monotonic() < deadline, (workdir / "log").read_text()
            time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


@pytest.fixture
def tool_env(bwrap_backend):
    made = []

    def make(**kwargs):
        env = gymnasium.make("arborl/Tool-v0", backend=bwrap_backend, **kwargs)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


def call(name: str, **args) -> str:
    return P.format_call(name, args)


def test_the_servers_tools_are_listed_and_called(tool_env, mcp_url):
    env = tool_env(mcp_servers=[{"url": mcp_url, "prefix": "calc_"}])
    _, info = env.reset()
    tools = {t["function"]["name"]: t["function"] for t in info["tools"]}
    assert {"calc_add", "calc_divide", "python", "final_answer"} <= set(tools)
    assert tools["calc_add"]["description"] == "Add two integers."
    assert tools["calc_add"]["parameters"]["properties"] == {
        "a": {"type": "integer"},
        "b": {"type": "integer"},
    }
    obs, _, terminated, _, info = env.step(call("calc_add", a=1234, b=5678))
    assert obs[0]["content"] == "6912" and not terminated
    assert info["tool_calls"][0]["ok"] is True


def test_malformed_calls_get_clear_errors(tool_env, mcp_url):
    env = tool_env(mcp_servers=[{"url": mcp_url, "prefix": "calc_", "tools": ["add", "divide"]}])
    env.reset()
    obs, *_, info = env.step(call("calc_add", a="two", b=3))  # refused by the listed schema
    assert info["tool_calls"][0]["error"] == "invalid_arguments"
    assert "calc_add" in obs[0]["content"] and "'two' is not of type 'integer'" in obs[0]["content"]
    obs, *_, info = env.step(call("calc_divide", a=1, b=0))  # the server's own error
    assert info["tool_calls"][0]["error"] == "tool_error"
    assert "calc_divide" in obs[0]["content"] and "division by zero" in obs[0]["content"]
    obs, *_, info = env.step(call("calc_sub", a=1, b=0))
    assert info["tool_calls"][0]["error"] == "unknown_tool" and "calc_add" in obs[0]["content"]


def test_each_episode_has_a_session_of_its_own(tool_env, mcp_url):
    # A server with per-session state (the handshake-era protocol keeps a session): two
    # concurrent episodes each see only their own, and the next episode starts afresh.
    server = {"url": mcp_url, "prefix": "calc_", "mode": "legacy"}
    envs = [tool_env(mcp_servers=[server]) for _ in range(2)]

    def remember(i: int, item: str) -> str:
        obs, *_ = envs[i].step(call("calc_remember", item=item))
        return obs[0]["content"]

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda e: e.reset(), envs))
        got = list(pool.map(remember, [0, 1, 0, 1], ["a1", "b1", "a2", "b2"]))
    assert sorted(got) == sorted(["a1", "b1", "a1,a2", "b1,b2"])
    assert remember(0, "a3") == "a1,a2,a3" and remember(1, "b3") == "b1,b2,b3"
    envs[0].reset()
    assert remember(0, "new") == "new" and remember(1, "b4") == "b1,b2,b3,b4"


def test_an_unreachable_server_is_an_infrastructure_error(tool_env):
    env = tool_env(mcp_servers=[{"url": f"http://127.0.0.1:{free_port()}/mcp", "timeout_s": 5}])
    with pytest.raises(Exception, match="cannot list the tools of MCP server"):
        env.reset()


def test_a_server_needs_exactly_one_transport():
    with pytest.raises(ValueError, match=r"either a url .* or a command"):
        MCPServerConfig()
    with pytest.raises(ValueError, match=r"either a url .* or a command"):
        MCPServerConfig(url="http://127.0.0.1:1/mcp", command=["python3", "server.py"])
    with pytest.raises(ValueError, match="command is empty"):
        MCPServerConfig(command=[])
    with pytest.raises(ValueError, match="are for stdio servers"):
        MCPServerConfig(url="http://127.0.0.1:1/mcp", env={"A": "1"})
    with pytest.raises(ValueError, match="does not exist on the host"):
        MCPServerConfig(command=["python3", "s.py"], upload={"/tmp/s": "/no/such/dir"})
