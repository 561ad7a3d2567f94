"""`arborl envs serve` as issue 37 found it, each against a real server subprocess: `--suite`
took only registered names (not the paths `arborl eval suite=` takes), every normal client
disconnect printed an ASGI traceback, and SIGTERM left the server's sandboxes behind
(SIGINT removed them)."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import time

import pytest
from served import Served, remove_sandboxes_of, sandboxes_of

from arborl.tasks.swebench.mini import INSTANCES, REPOS

pytest.importorskip("openenv.core", reason="OpenEnv is in the `ecosystem` extra")
pytestmark = pytest.mark.slow

NOISE = ("Traceback", "Exception in ASGI application", "ERROR")


@pytest.mark.parametrize("name", ["mine.jsonl", "sub/mine.json"])
def test_suite_takes_a_path_as_eval_does(tmp_path, bwrap_backend, name):
    from openenv.core.generic_client import GenericEnvClient

    from arborl.eval.config import EvalConfig
    from arborl.eval.runner import resolve_suite

    rows = [json.loads(line) for line in INSTANCES.read_text().splitlines()[:2]]
    (tmp_path / name).parent.mkdir(exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows) if name.endswith("l") else json.dumps(rows)
    (tmp_path / name).write_text(text)
    # what eval makes of the same file: its task ids are the ones the server takes
    suite = resolve_suite(EvalConfig(suite=str(tmp_path / name), swe={"repos_dir": [str(REPOS)]}))
    ids = [t.id for t in suite.tasks()]
    assert ids == [r["instance_id"] for r in rows]
    server = Served(
        ["--suite", name, "--repos-dir", str(REPOS), "--env-kwargs", '{"backend": "bwrap"}'], tmp_path
    )
    try:
        server.wait()
        assert "serving arborl/Code-v0" in server.text()  # the suite's env, as eval runs it
        with GenericEnvClient(base_url=server.url()).sync() as env:
            first = env.reset(task=ids[1]).observation["messages"][-1]["content"]
            assert rows[1]["problem_statement"].strip() in first
            assert env.state()["task_id"] == ids[1]
            with pytest.raises(RuntimeError, match="has no task 'arborl-mini__nope'"):
                env.reset(task="arborl-mini__nope")
    finally:
        server.stop()
    missing = Served(["--suite", "nowhere/mine.jsonl"], tmp_path)
    assert missing.proc.wait(120) == 2 and "nowhere/mine.jsonl does not exist" in missing.text()


def test_client_disconnects_are_quiet(tmp_path, bwrap_backend):
    from openenv.core.generic_client import GenericEnvClient
    from websockets.sync.client import connect

    server = Served(
        ["arborl/Tool-v0", "--suite", "tool-mini", "--env-kwargs", '{"backend": "bwrap"}'], tmp_path
    )
    try:
        server.wait()
        with GenericEnvClient(base_url=server.url()).sync() as env:  # the normal end: a close message
            env.reset(task="tool-mini/arith-000")
            env.step({"text": "The answer is 159."})
        auth = {"Authorization": f"Bearer {server.token}"}
        ws = f"ws://127.0.0.1:{server.port}/ws"
        with connect(ws, additional_headers=auth) as sock:  # a client that just closes its socket
            sock.send(json.dumps({"type": "reset", "data": {}}))
            sock.recv(timeout=60)
        sock = connect(ws, additional_headers=auth)  # one that goes away without a word (killed)
        sock.send(json.dumps({"type": "reset", "data": {}}))
        sock.recv(timeout=60)
        sock.socket.shutdown(socket.SHUT_RDWR)
        sock.socket.close()
        time.sleep(2)  # the server notices and ends the sessions
        assert server.http("POST", "/reset", {})[0] == 200  # still serving
    finally:
        server.stop()
    log = server.text()
    assert not [n for n in NOISE if n in log], log[-3000:]


@pytest.mark.parametrize(
    "backend,sig",
    [
        # CI runs each backend with one signal (15-25 s each); `pytest -m full` all four.
        pytest.param("docker", signal.SIGTERM, marks=pytest.mark.docker),
        pytest.param("docker", signal.SIGINT, marks=[pytest.mark.docker, pytest.mark.full]),
        pytest.param("bwrap", signal.SIGTERM, marks=pytest.mark.full),
        ("bwrap", signal.SIGINT),
    ],
    ids=["docker-SIGTERM", "docker-SIGINT", "bwrap-SIGTERM", "bwrap-SIGINT"],
)
def test_a_signal_removes_every_sandbox(tmp_path, request, backend, sig):
    """The server stopped mid-episode, a client still connected: every sandbox it made goes."""
    from openenv.core.generic_client import GenericEnvClient

    from arborl.tasks import get_suite

    request.getfixturevalue(f"{backend}_backend")  # skips where the backend is missing
    task_id = get_suite("swe-mini").tasks()[0].id
    kwargs = json.dumps({"backend": backend})
    server = Served(["arborl/Code-v0", "--suite", "swe-mini", "--env-kwargs", kwargs], tmp_path)
    pid = server.proc.pid
    client = None
    try:
        server.wait()
        client = GenericEnvClient(base_url=server.url()).sync()
        client.connect()
        client.reset(task=task_id)
        made = sandboxes_of(pid)
        assert made[backend], f"the episode made no {backend} sandbox: {made}"
        status = server.stop(sig)
        left = sandboxes_of(pid, seen=made["bwrap"])
        assert left == {"docker": [], "bwrap": [], "cgroups": []}, f"{signal.Signals(sig).name} left {left}"
        assert status in (-sig, 128 + sig), f"exit status {status}: {server.text()[-2000:]}"  # died of it
        assert not [n for n in NOISE if n in server.text()], server.text()[-3000:]
    finally:
        if client is not None:
            with contextlib.suppress(Exception):  # the server closed the session first
                client.close()
        server.stop(signal.SIGKILL)
        remove_sandboxes_of(pid)  # only after a failure is there anything to remove
