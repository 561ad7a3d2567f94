"""MCP stdio servers run inside the episode's sandbox: a real `fastmcp` server, started by
`arborl/Tool-v0` in its bwrap sandbox through the relay (`mcp_sandbox.py`), spoken to by the
`mcp` package's client. The sandbox's python3 (the host's /usr/bin/python3) has no fastmcp,
so the test stages it (`mcp_staging.py`) and the env uploads it (`upload=`)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import gymnasium
import pytest
from arborl_require import unavailable
from mcp_staging import stage_fastmcp

from arborl.envs.parsers import get_parser
from arborl.sandboxes import PoolConfig, SandboxPool

pytestmark = pytest.mark.slow
P = get_parser("hermes")

SERVER = '''
import json, os, socket
from fastmcp import FastMCP

mcp = FastMCP("box")
memory = []


@mcp.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@mcp.tool
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


@mcp.tool
def whoami() -> str:
    """Where this server runs: its pid, host name, parent's command line."""
    with open("/proc/%d/cmdline" % os.getppid(), "rb") as f:
        parent = f.read().replace(b"\\0", b" ").decode()
    return json.dumps({"pid": os.getpid(), "hostname": socket.gethostname(), "parent": parent})


@mcp.tool
def read(path: str) -> str:
    """The text of a file, or that it does not exist."""
    return open(path).read() if os.path.exists(path) else "no such file"


@mcp.tool
def remember(item: str) -> str:
    """Keep an item in this server's memory; returns all kept so far."""
    memory.append(item)
    return ",".join(memory)


if __name__ == "__main__":
    mcp.run(transport="stdio", show_banner=False)
'''


@pytest.fixture(scope="module")
def box_server(tmp_path_factory):
    """The stdio server's config: the server and the staged fastmcp, uploaded each episode."""
    try:
        import fastmcp  # noqa: F401
        import mcp  # noqa: F401
    except ImportError as e:
        unavailable("mcp", f"{e}: pip install -e '.[mcp]' (and fastmcp for the tests)")
    root = tmp_path_factory.mktemp("mcp-stdio")
    (root / "server").mkdir()
    (root / "server" / "box.py").write_text(SERVER)
    deps = stage_fastmcp(root / "server" / "box.py", root / "deps.tgz")
    return {
        "command": ["python3", "/tmp/mcp-box/box.py"],
        "prefix": "box_",
        "upload": {"/tmp/mcp-deps": str(deps), "/tmp/mcp-box": str(root / "server")},
        "env": {"PYTHONPATH": "/tmp/mcp-deps"},
        "timeout_s": 60,
    }


@pytest.fixture
def tool_env(bwrap_backend):
    made = []

    def make(**kwargs):
        env = gymnasium.make("arborl/Tool-v0", backend=bwrap_backend, park_s=120, **kwargs)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


def call(name: str, **args) -> str:
    return P.format_call(name, args)


def content(env, name: str, **args) -> str:
    obs, _, terminated, *_ = env.step(call(name, **args))
    assert not terminated, obs
    return obs[0]["content"]


def py(env, code: str) -> str:
    """What the agent's `python` tool printed (without the exit code line)."""
    return content(env, "python", code=code).split("[exit code")[0].strip()


def test_a_stdio_server_is_listed_and_called_inside_the_sandbox(tool_env, box_server, tmp_path):
    env = tool_env(mcp_servers=[box_server])
    _, info = env.reset()
    tools = {t["function"]["name"]: t["function"] for t in info["tools"]}
    assert {"box_add", "box_whoami", "box_read", "python", "final_answer"} <= set(tools)
    assert tools["box_add"]["description"] == "Add two integers."
    assert tools["box_add"]["parameters"]["properties"] == {
        "a": {"type": "integer"},
        "b": {"type": "integer"},
    }
    assert content(env, "box_add", a=1234, b=5678) == "6912"
    # It sees the sandbox, not the host: the sandbox's host name, a file the agent's python
    # wrote in the sandbox, none of the host's files, and it is the relay's child.
    me = json.loads(content(env, "box_whoami"))
    assert me["hostname"] == "sandbox" and "relay.py recv" not in me["parent"]
    assert "/tmp/.arborl-mcp-" in me["parent"] and "relay.py start" in me["parent"]
    content(env, "python", code="open('/workspace/only-here.txt', 'w').write('sandboxed')")
    assert content(env, "box_read", path="/workspace/only-here.txt") == "sandboxed"
    (tmp_path / "host-only.txt").write_text("host")
    assert content(env, "box_read", path=str(tmp_path / "host-only.txt")) == "no such file"
    assert (
        py(env, f"import os; print(os.path.exists('/proc/{me['pid']}'))") == "True"
    )  # the agent's own pid namespace holds it


def test_malformed_calls_get_clear_errors(tool_env, box_server):
    env = tool_env(mcp_servers=[{**box_server, "tools": ["add", "divide"]}])
    _, info = env.reset()
    assert {"box_add", "box_divide"} <= {t["function"]["name"] for t in info["tools"]}
    assert "box_whoami" not in {t["function"]["name"] for t in info["tools"]}
    obs, *_, info = env.step(call("box_add", a="two", b=3))  # refused by the listed schema
    assert info["tool_calls"][0]["error"] == "invalid_arguments"
    assert "box_add" in obs[0]["content"] and "'two' is not of type 'integer'" in obs[0]["content"]
    obs, *_, info = env.step(call("box_divide", a=1, b=0))  # the server's own error
    assert info["tool_calls"][0]["error"] == "tool_error"
    assert "box_divide" in obs[0]["content"] and "division by zero" in obs[0]["content"]


def test_the_server_is_gone_after_reset_and_the_next_episode_starts_afresh(tool_env, box_server):
    env = tool_env(mcp_servers=[box_server])
    env.reset()
    first = json.loads(content(env, "box_whoami"))
    assert content(env, "box_remember", item="first-episode") == "first-episode"
    env.reset()  # the same sandbox (parked), reset in place
    second = json.loads(content(env, "box_whoami"))
    assert second["parent"] != first["parent"]
    assert content(env, "box_remember", item="second") == "second"  # nothing of the first
    probe = (
        "import os\n"
        f"print(os.path.exists('/proc/{first['pid']}'), os.path.exists('/proc/{second['pid']}'))\n"
        "print(sorted(n for n in os.listdir('/tmp') if n.startswith('.arborl-mcp-')))"
    )
    alive, dirs = py(env, probe).splitlines()
    assert alive == "False True"  # the first episode's server was killed, this one runs
    assert len(eval(dirs)) == 1  # and its relay's directory is gone with it


async def test_the_server_is_killed_when_the_sandbox_goes_back_to_the_pool(bwrap_backend, box_server):
    async with SandboxPool(bwrap_backend, PoolConfig(max_size=1)) as pool:
        env = gymnasium.make("arborl/Tool-v0", pool=pool, park_s=0, mcp_servers=[box_server])
        await env.areset()
        obs, *_ = await env.astep(call("box_whoami"))
        pid = json.loads(obs[0]["content"])["pid"]
        spec = env.unwrapped.sandbox_spec(env.unwrapped.task)
        await env.aclose()  # the episode ends: its sandbox goes back and is reset
        await pool.drain()
        sb = await pool.checkout(spec)  # the same sandbox (the pool holds one), reset
        try:
            r = await sb.exec(["python3", "-c", f"import os; print(os.path.exists('/proc/{pid}'))"])
            ps = await sb.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
        finally:
            pool.checkin(sb)
        await pool.drain()
    assert r.stdout.strip() == "False"
    assert ps.ok and "server.main" in ps.stdout  # the listing works: it shows the sandbox's server
    assert ".arborl-mcp-" not in ps.stdout and "box.py" not in ps.stdout, ps.stdout


def test_a_server_the_agent_kills_is_an_error_result_not_an_env_error(tool_env, box_server):
    env = tool_env(mcp_servers=[box_server])
    env.reset()
    me = json.loads(content(env, "box_whoami"))
    content(env, "python", code=f"import os, signal; os.kill({me['pid']}, signal.SIGKILL)")
    obs, _, terminated, _, info = env.step(call("box_add", a=1, b=2))
    assert info["tool_calls"][0]["error"] == "tool_error" and not terminated
    assert "box_add" in obs[0]["content"] and "MCP server" in obs[0]["content"]


def test_concurrent_episodes_keep_their_own_sessions(tool_env, box_server):
    envs = [tool_env(mcp_servers=[box_server]) for _ in range(2)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda e: e.reset(), envs))

        def remember(i: int, item: str) -> str:
            return content(envs[i], "box_remember", item=item)

        got = list(pool.map(remember, [0, 1, 0, 1], ["a1", "b1", "a2", "b2"]))
    assert sorted(got) == sorted(["a1", "b1", "a1,a2", "b1,b2"])
    assert content(envs[0], "box_remember", item="a3") == "a1,a2,a3"
    assert content(envs[1], "box_remember", item="b3") == "b1,b2,b3"


def test_a_server_that_cannot_start_is_an_infrastructure_error(tool_env, box_server):
    env = tool_env(mcp_servers=[{**box_server, "command": ["python3", "/tmp/mcp-box/missing.py"]}])
    with pytest.raises(Exception, match=r"missing\.py"):
        env.reset()


def test_code_env_gets_the_tools_of_a_stdio_server_in_its_sandbox(bwrap_backend, box_server):
    env = gymnasium.make("arborl/Code-v0", backend=bwrap_backend, mcp_servers=[box_server])
    try:
        _, info = env.reset()  # the default task: calc.py's add subtracts
        names = [t["function"]["name"] for t in info["tools"]]
        assert names[:4] == ["bash", "str_replace_editor", "run_tests", "submit"]
        assert {"box_add", "box_read", "box_whoami"} <= set(names)
        # The server sees the episode's repository, in the sandbox.
        assert content(env, "box_read", path="/workspace/calc.py") == "def add(a, b):\n    return a - b\n"
        assert json.loads(content(env, "box_whoami"))["hostname"] == "sandbox"
        content(env, "bash", command="sed -i 's/a - b/a + b/' calc.py")
        obs, reward, terminated, _, info = env.step(call("submit"))
        assert terminated and reward == 1.0, obs
        # Neither the relay nor the staged server is part of the agent's patch.
        assert "calc.py" in info["model_patch"] and "arborl-mcp" not in info["model_patch"]
        assert "mcp-box" not in info["model_patch"]
    finally:
        env.close()
