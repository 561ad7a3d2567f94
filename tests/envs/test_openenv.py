"""OpenEnv both ways, through docs/envs.md's worked examples run as written: an OpenEnv server
(OpenEnv's own `openenv init` echo template) driven as an arborl env, and an arborl env served
by `arborl envs serve` driven by OpenEnv's `GenericEnvClient` (with the server's token).
Everything on 127.0.0.1."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("openenv.core", reason="OpenEnv is in the `ecosystem` extra")
pytestmark = pytest.mark.slow

DOCS = Path(__file__).parents[2] / "docs" / "envs.md"
BIN = str(Path(sys.executable).parent)


def block(marker: str) -> str:
    """The fenced block right after `<!-- example: marker -->` in docs/envs.md."""
    m = re.search(rf"<!-- example: {marker} -->\n```\w+\n(.*?)```", DOCS.read_text(), re.DOTALL)
    assert m, f"docs/envs.md has no {marker} example"
    return m.group(1)


def port_of(script: str) -> int:
    return int(re.search(r"--port (\d+)", script).group(1))


class Server:
    """A docs bash block run in the background (its own process group), until /health answers."""

    def __init__(self, script: str, cwd: Path) -> None:
        self.port = port_of(script)
        self.log = cwd / "server.log"
        env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                ["bash", "-ec", script], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def wait(self, timeout_s: float = 240.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            time.sleep(0.5)
        raise AssertionError(f"no server on port {self.port}: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


#: Run before a docs client block: importing OpenEnv (gradio) takes 10-15 s, as long as the
#: server's own start-up, so the client imports while the server starts, then waits for it;
#: the block itself still runs as written.
CLIENT_PRELUDE = """
import time, urllib.request
import openenv.core
deadline = time.monotonic() + 240
while True:
    try:
        with urllib.request.urlopen("http://127.0.0.1:{port}/health", timeout=2):
            break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.3)
"""


def run_client_with(server: Server, code: str, cwd: Path) -> str:
    """Start the docs client block beside the starting server; its stdout."""
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT_PRELUDE.format(port=server.port) + code],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        server.wait()
        out, err = client.communicate(timeout=300)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert client.returncode == 0, err[-3000:]
    return out


def test_use_an_openenv_server_as_an_arborl_env(tmp_path):
    server = Server(block("use-openenv-server"), tmp_path)
    try:
        out = run_client_with(server, block("use-openenv-python"), tmp_path).splitlines()
        assert out == ["Echo Env environment ready!", "hello 0.5"]
    finally:
        server.stop()


def test_serve_an_arborl_env_to_an_openenv_client(tmp_path, bwrap_backend):
    server = Server(block("serve-arborl-server"), tmp_path)
    try:
        out = run_client_with(server, block("serve-arborl-python"), tmp_path).splitlines()
        assert out == ["What is 73 + 86?", "159", "1.0 True"]
    finally:
        server.stop()


def test_adapter_maps_replies_and_observations():
    from arborl.envs.base import TaskError
    from arborl.envs.openenv_client import OpenEnvEnv

    with pytest.raises(ValueError, match="exactly one"):
        OpenEnvEnv()
    env = OpenEnvEnv(base_url="http://127.0.0.1:9")
    assert env._action('I will move: {"x": 1} then {"x": 2, "y": [3]}') == {"x": 2, "y": [3]}
    with pytest.raises(TaskError):
        env._action("no json here")
    assert env._message({"b": 1, "a": "z"}) == '{"a": "z", "b": 1}'
    env.observation_field = "a"
    assert env._message({"b": 1, "a": "z"}) == "z"


@pytest.mark.docker
def test_an_openenv_docker_image_as_an_arborl_env(tmp_path, docker_backend):
    """An image that serves OpenEnv (OpenEnv's echo template on arborl/base; its Python packages
    mounted from this venv, as the machine has no registry): started, health-checked, driven
    and removed by the env, with nothing left behind."""
    import sysconfig

    import docker
    import gymnasium

    from arborl.envs.openenv_client import LABEL, OpenEnvEnv

    subprocess.run([f"{BIN}/openenv", "init", "echo_env"], cwd=tmp_path, check=True, capture_output=True)
    (tmp_path / "Dockerfile").write_text(
        "FROM arborl/base:latest\nCOPY echo_env /srv/echo_env\nWORKDIR /srv/echo_env\nENV PYTHONPATH=/deps\n"
        'CMD ["python3", "-m", "uvicorn", "server.app:app", "--host", "0.0.0.0", "--port", "8000"]\n'
    )
    engine = docker.from_env()
    tag = "arborl-test/openenv-echo:latest"
    engine.images.build(path=str(tmp_path), tag=tag, rm=True)
    deps = {sysconfig.get_paths()["purelib"]: {"bind": "/deps", "mode": "ro"}}
    env = OpenEnvEnv(
        image=tag, action_field="message", observation_field="echoed_message",
        start_timeout_s=300, docker_options={"volumes": deps},
    )  # fmt: skip
    try:
        assert isinstance(env, gymnasium.Env)
        obs, _ = env.reset()
        assert obs[-1]["content"] == "Echo Env environment ready!"
        assert len(engine.containers.list(filters={"label": LABEL})) >= 1
        obs, reward, terminated, _, info = env.step("hi")
        assert obs[-1]["content"] == "hi" and reward == pytest.approx(0.2) and not terminated
        assert info["openenv"]["observation"]["message_length"] == 2
        ran = env.container.id
    finally:
        env.close()
        engine.images.remove(tag, force=True)
    assert env.container is None
    assert ran not in [c.id for c in engine.containers.list(all=True)]


@pytest.mark.browser
def test_serve_the_miniwob_env_over_openenv(tmp_path, web_chromium, bwrap_backend):
    """A web env over OpenEnv: a MiniWoB page solved through the client, scored by the page."""
    from openenv.core.generic_client import GenericEnvClient
    from served import Served

    server = Served(["--suite", "web-miniwob", "--env-kwargs", '{"backend": "bwrap"}'], tmp_path)
    try:
        server.wait()
        with GenericEnvClient(base_url=server.url()).sync() as env:
            first = env.reset(task="miniwob/click-test-s0")
            page = first.observation["messages"][-1]["content"]
            assert page.startswith("Task: Click the button.")
            ref = re.search(r'button "Click Me!" \[ref=(e\d+)\]', page).group(1)
            result = env.step({"text": f"click({ref})"})
            assert result.reward == 1.0 and result.done
            assert result.observation["info"]["miniwob"]["raw"] == 1
            assert env.state()["task_id"] == "miniwob/click-test-s0"
    finally:
        server.stop()
