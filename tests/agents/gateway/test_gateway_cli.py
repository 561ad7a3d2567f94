"""`arborl gateway` as a user starts it: a process serving the tiny model on loopback."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import openai
import pytest

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_command_serves_episodes_opened_with_the_admin_token(tiny_model, tmp_path):
    port, token_file = free_port(), tmp_path / "token"
    cmd = [sys.executable, "-m", "arborl.cli", "gateway", "--model", str(tiny_model),
           "--port", str(port), "--admin-token-file", str(token_file)]  # fmt: skip
    log = (tmp_path / "log").open("w")
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "log").read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/v1/models", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, (tmp_path / "log").read_text()
            time.sleep(0.3)
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        admin = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
        eid = httpx.post(f"{url}/admin/episodes", json={}, headers=admin, timeout=30).json()["episode_id"]
        c = openai.OpenAI(base_url=f"{url}/v1", api_key=eid, max_retries=0)  # the id as the API key
        r = c.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Hi."}], max_tokens=5
        )
        body = httpx.post(f"{url}/admin/episodes/{eid}/end", json={"reward": 1}, headers=admin, timeout=30)
        (traj,) = body.json()["trajectories"]
        assert len(traj["turns"][0]["response_ids"]) == r.usage.completion_tokens
        assert len(traj["prompt_ids"]) == r.usage.prompt_tokens
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
    assert "admin token: in" in (tmp_path / "log").read_text()  # the token is not printed


def test_listening_beyond_loopback_needs_allow_remote(tiny_model):
    out = subprocess.run(
        [sys.executable, "-m", "arborl.cli", "gateway", "--model", str(tiny_model), "--host", "0.0.0.0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2 and "--allow-remote" in out.stderr
