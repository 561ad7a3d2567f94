"""Hostile code is contained, reported as a clear result, and the sandbox keeps serving.

Each test runs against a real Docker engine and real bubblewrap (the `backend` fixture).
Egress tests only aim at a server the test itself starts on this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import threading
import time

import pytest

from arborl.sandboxes import Limits, SandboxCrashed, SandboxSpec, SandboxUnavailable

SMALL = SandboxSpec(limits=Limits(memory_mb=256, pids=128, max_file_mb=32, tmp_mb=64))


@contextlib.contextmanager
def tcp_server(host: str):
    """A listener on this machine that answers b"pong"; yields its port."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"pong")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join()
        srv.close()


def _host_address(backend) -> str:
    """Where a server on this host would be reachable from a sandbox that has a network."""
    if backend.name == "docker":
        ipam = backend.client.networks.get("bridge").attrs["IPAM"]["Config"][0]
        # Docker 20.10 may leave Gateway out; the bridge's gateway is the subnet's first host.
        return ipam.get("Gateway") or str(next(ipaddress.ip_network(ipam["Subnet"]).hosts()))
    return "127.0.0.1"


CONNECT = (
    "python3 -c \"import socket,sys; s=socket.create_connection(('{h}', {p}), timeout=3); print(s.recv(4))\""
)


async def test_no_network_egress_unless_asked(backend):
    host = _host_address(backend)
    with tcp_server(host) as port:
        async with await backend.create(SMALL) as sb:
            res = await sb.exec(CONNECT.format(h=host, p=port), timeout=20)
            assert res.exit_code != 0 and "pong" not in res.stdout
            assert "unreachable" in res.stderr or "refused" in res.stderr or "timed out" in res.stderr
            dev = (await sb.exec("tail -n +3 /proc/net/dev")).stdout.splitlines()
            assert [line.split(":")[0].strip() for line in dev] == ["lo"]
        # Positive control: the same probe gets through when the spec asks for a network
        # (Docker); the bubblewrap backend refuses a network rather than share the host's.
        if backend.name == "bwrap":
            with pytest.raises(SandboxUnavailable):
                await backend.create(SMALL.model_copy(update={"network": True}))
            return
        async with await backend.create(SMALL.model_copy(update={"network": True})) as sb:
            res = await sb.exec(CONNECT.format(h=host, p=port), timeout=20)
            assert res.ok and "pong" in res.stdout


async def test_host_files_are_out_of_reach(backend, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    async with await backend.create(SMALL) as sb:
        res = await sb.exec(f"cat {secret}; cat /etc/shadow; ls /root; ls /work", timeout=10)
        assert "host secret" not in res.stdout
        assert "root:" not in res.stdout  # /etc/shadow unreadable
        assert res.exit_code != 0


async def test_fork_bomb_is_contained_and_reset_recovers(backend):
    async with await backend.create(SMALL) as sb:
        res = await sb.exec("bomb() { bomb | bomb & }; bomb", timeout=3)
        # The bomb backgrounds itself. The exec comes back once bash has exited and the pipes
        # are quiet (a race with the children's first "Resource temporarily unavailable"), or
        # at its deadline: either way the harness is not held by the bomb.
        assert res.duration_s < 3 + 2
        await asyncio.sleep(1)
        # Counted by the kernel (the pids cgroup), not by a /proc scan that races the bomb.
        pids = (await sb.ping())["pids"]
        assert pids["max"] == SMALL.limits.pids and pids["current"] <= SMALL.limits.pids
        # The bomb ran into the limit and the kernel held it there.
        assert pids["peak"] is None or pids["peak"] == SMALL.limits.pids
        reset = await sb.reset()
        assert reset.total_s < 30
        after = await sb.exec("echo alive; pgrep -c bash || true", timeout=10)
        assert after.ok and after.stdout.split()[0] == "alive"
        assert int(after.stdout.split()[1]) <= 1


async def test_memory_bomb_is_reported(backend):
    async with await backend.create(SMALL) as sb:
        res = await sb.exec("python3 -c 'x = bytearray(2 * 1024**3); print(len(x))'", timeout=60)
        assert res.exit_code != 0 and not res.timed_out
        assert res.oom_killed and res.signal == 9  # the sandbox's memory cgroup, on both backends
        assert (await sb.exec("echo still here")).stdout == "still here\n"


async def test_disk_fill_hits_the_file_size_limit(backend):
    async with await backend.create(SMALL) as sb:
        start = time.monotonic()
        res = await sb.exec("dd if=/dev/zero of=/workspace/big bs=1M count=4096", timeout=60)
        assert res.exit_code != 0 and not res.timed_out
        assert "File too large" in res.stderr or res.signal == 25  # SIGXFSZ
        size = int((await sb.exec("stat -c %s /workspace/big")).stdout)
        assert size <= 32 * 2**20
        assert time.monotonic() - start < 30
        await sb.reset()
        assert (await sb.exec("test -e /workspace/big || echo gone")).stdout == "gone\n"


async def test_infinite_loop_times_out(backend):
    async with await backend.create(SMALL) as sb:
        start = time.monotonic()
        res = await sb.exec("while true; do :; done", timeout=1)
        assert res.timed_out and time.monotonic() - start < 5
        assert (await sb.exec("echo ok")).ok


async def test_killing_pid1_and_everything_does_not_break_docker(docker_backend):
    async with await docker_backend.create(SMALL) as sb:
        res = await sb.exec("kill -9 1; kill -9 -1; echo done", timeout=10)
        assert "Operation not permitted" in res.stderr or res.exit_code != 0
        assert (await sb.exec("echo alive")).stdout == "alive\n"


async def test_the_agent_cannot_kill_the_local_server(bwrap_backend):
    # The server runs as root, the agent as a uid of its own: kill -9 -1 reaches only the
    # agent's own processes. A sandbox killed from outside is a typed crash, never a hang.
    async with await bwrap_backend.create(SMALL) as sb:
        res = await sb.exec("kill -9 1; kill -9 2; kill -9 -1; echo done", timeout=10)
        assert "Operation not permitted" in res.stderr or res.exit_code != 0
        assert (await sb.exec("echo alive")).stdout == "alive\n"
        threading.Timer(0.5, lambda: os.killpg(sb.handle[0].pid, 9)).start()
        with pytest.raises(SandboxCrashed, match="bwrap exited"):
            await sb.exec("sleep 20", timeout=30)


async def test_hundred_megabytes_of_stdout(backend):
    async with await backend.create(SMALL) as sb:
        res = await sb.exec("head -c 100000000 /dev/zero | tr '\\0' x", timeout=60, max_output=4096)
        assert res.ok and res.truncated
        assert res.stdout_bytes == 100_000_000 and len(res.stdout) < 5000


async def test_container_killed_mid_exec_raises_crashed(docker_backend):
    async with await docker_backend.create(SMALL) as sb:
        threading.Timer(0.5, lambda: sb.handle.kill()).start()
        with pytest.raises(SandboxCrashed, match=r"exit code|exited"):
            await sb.exec("sleep 20", timeout=30)
