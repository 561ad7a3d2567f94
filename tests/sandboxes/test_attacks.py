"""The agent attacks its own harness, the way a policy optimised against its verifier would.

Each test runs what an agent could run (commands as the sandbox's agent user, through the
public API) on a real Docker engine and real bubblewrap, and checks that the attack fails:
the agent cannot reach the server's channel, replace it, re-snapshot, make the harness follow
its links, keep state across a reset, take unbounded host resources, or kill the server. The
issue that listed these attacks reproduced every one of them on the code before this module.

The attacks that go through a sandbox's public API (`agent_side`) also run on a sandbox of a
remote Ray node, as `sandbox=ray` gives one: the agent's side is the same there, and the
harness's calls cross Ray first. Those that reach into the harness's own end (the channel's
socket and key, the run directory, the pool's labels) stay local: on a node they are the
node's own pool's, which the local runs already cover.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import threading
from pathlib import Path

import pytest

from arborl.sandboxes import (
    Limits,
    SandboxCrashed,
    SandboxOpError,
    SandboxPool,
    SandboxSpec,
    SandboxUnavailable,
)
from arborl.sandboxes.pool import PoolConfig

SMALL = SandboxSpec(limits=Limits(memory_mb=256, pids=128, max_file_mb=256, tmp_mb=16, disk_mb=64))

# What an agent would write: a client for the server's wire format, asking for root.
ROOT_CLIENT = r"""
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("/run/arborl/agent.sock")
except OSError as e:
    sys.exit(f"connect: {type(e).__name__}: {e}")
for req in ({"op": "exec", "cmd": "id", "user": "root"},
            {"op": "snapshot", "paths": ["/workspace"]}):
    data = json.dumps(req).encode()
    s.sendall(struct.pack(">I", len(data)) + data)
    head = s.recv(4)
    if len(head) < 4:
        sys.exit("server hung up")
    print(s.recv(struct.unpack(">I", head)[0]).decode())
"""


def agent_python(code: str) -> str:
    return "python3 - <<'EOF'\n" + code + "\nEOF"


class RemoteNode:
    """`create(spec)` as a backend has it, for a sandbox on another Ray node, reached as the
    harness reaches one with sandbox=ray (a `RemoteSandbox`; closing it destroys it)."""

    def __init__(self, pool) -> None:
        self.pool = pool
        self.name = "ray"

    async def create(self, spec: SandboxSpec):
        sb = await self.pool.checkout(spec)
        assert sb.node_id != self.pool.own_node  # on a node other than the harness's
        return sb


@pytest.fixture(scope="module")
def ray_nodes(bwrap_backend):
    """A Ray cluster whose one sandbox node (bubblewrap) is not the head this process runs on."""
    from ray_cluster import ray_cluster

    with ray_cluster(2, head_offers=False) as cluster:
        yield cluster


# xdist_group: one Ray cluster at a time (tests/conftest.py)
@pytest.fixture(
    params=["docker", "bwrap", pytest.param("ray", marks=[pytest.mark.slow, pytest.mark.xdist_group("ray")])]
)
async def agent_side(request):
    """Each test using this runs on a local Docker sandbox, a local bubblewrap one, and one on
    a remote Ray node (tests that reach into the channel or the host's files use `backend`)."""
    if request.param != "ray":
        yield request.getfixturevalue(f"{request.param}_backend")
        return
    from arborl.sandboxes.ray import RayPoolConfig, RaySandboxPool

    request.getfixturevalue("ray_nodes")
    cfg = RayPoolConfig(backend={"type": "bwrap"}, pool=PoolConfig(max_size=2, health_interval_s=0))
    async with RaySandboxPool(cfg) as pool:
        yield RemoteNode(pool)


async def test_agent_cannot_get_root_or_resnapshot_through_the_socket(agent_side):
    async with await agent_side.create(SMALL) as sb:
        res = await sb.exec(agent_python(ROOT_CLIENT), timeout=20)
        assert "uid=0" not in res.stdout and '"restore"' not in res.stdout
        assert "PermissionError" in res.stderr or "hung up" in res.stderr, res.output
        assert (await sb.exec("id -u")).stdout.strip() != "0"


AGENT_IDS = r"""
import os, sys
assert os.setresuid(0, 0, 0) is None, "regained root"
"""


@pytest.mark.parametrize("cmd", ["shell", "argv"])
async def test_agent_commands_keep_no_way_back_to_root(agent_side, cmd):
    """Real, effective, saved and filesystem ids are all the agent's, no supplementary group,
    no capability: nothing the agent runs (a shell command or an argv) can switch back."""
    async with await agent_side.create(SMALL) as sb:
        status = "cat /proc/self/status" if cmd == "shell" else ["cat", "/proc/self/status"]
        fields = dict(
            line.split(":", 1) for line in (await sb.exec(status)).stdout.splitlines() if ":" in line
        )
        uid = fields["Uid"].split()
        assert len(set(uid)) == 1 and uid[0] != "0", fields["Uid"]
        assert len(set(fields["Gid"].split())) == 1 and fields["Gid"].split()[0] != "0"
        assert fields["Groups"].strip() == ""
        for cap in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
            assert int(fields[cap], 16) == 0, (cap, fields[cap])
        res = await sb.exec(agent_python(AGENT_IDS))
        assert res.exit_code != 0 and "PermissionError" in res.stderr, res.output


async def test_agent_cannot_move_or_replace_the_socket(agent_side):
    async with await agent_side.create(SMALL) as sb:
        for attack in (
            "mv /run/arborl/agent.sock /tmp/stolen.sock",
            "ln -sf /tmp/x /run/arborl/agent.sock",
            "rm -f /run/arborl/agent.sock",
            "touch /run/arborl/fake",
        ):
            res = await sb.exec(attack, timeout=10)
            assert res.exit_code != 0 and "denied" in res.stderr, (attack, res.output)
        listing = (await sb.exec("ls -la /run/arborl", user="root")).stdout
        assert "agent.sock" in listing and "fake" not in listing
        # the server still answers on its own socket, to the harness only
        assert (await sb.exec("echo still mine")).stdout == "still mine\n"


class FakeServer:
    """What an agent that got write access to the socket's path would put there: a server
    that answers every request with a forged test run, or with a huge frame."""

    def __init__(self, path: str, huge: bool = False) -> None:
        self.path, self.huge, self.requests = path, huge, 0
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(path)
        self.sock.listen(4)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(65536)
                    self.requests += 1
                    if self.huge:
                        conn.sendall(struct.pack(">I", 2**31) + b"x" * 65536)
                    else:
                        body = json.dumps(
                            {"ok": True, "exit_code": 0, "stdout": "42 passed", "stderr": ""}
                        ).encode()
                        conn.sendall(struct.pack(">I", len(body)) + body)
                        conn.recv(65536)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def _fresh_connection_exec(sb, cmd: str):
    """Run `sb.exec` on a new event loop, so the channel must open a new connection."""
    return asyncio.to_thread(asyncio.run, sb.exec(cmd, timeout=10))


@pytest.mark.parametrize("impostor", ["forged-results", "huge-frame", "symlink-to-host-socket"])
async def test_harness_never_talks_to_an_impostor(backend, tmp_path, impostor):
    async with await backend.create(SMALL) as sb:
        path = sb.channel.socket_path
        os.rename(path, path + ".real")
        fake = None
        if impostor == "symlink-to-host-socket":
            host_sock = FakeServer(str(tmp_path / "host.sock"))
            os.symlink(host_sock.path, path)
        else:
            fake = host_sock = FakeServer(path, huge=impostor == "huge-frame")
        try:
            with pytest.raises(SandboxCrashed, match="no longer trustworthy"):
                res = await _fresh_connection_exec(sb, "pytest -q")
                pytest.fail(f"the harness accepted {res!r} from an impostor")
            if impostor != "symlink-to-host-socket":
                assert fake is not None and fake.requests == 1  # only the hello, no request
            else:
                assert host_sock.requests == 0  # a link is refused before connecting
        finally:
            host_sock.close()
            os.unlink(path)
            os.rename(path + ".real", path)


async def test_file_operations_do_not_follow_the_agents_links(agent_side):
    async with await agent_side.create(SMALL) as sb:
        await sb.exec("ln -s /etc/shadow /workspace/notes.txt; ln -s /etc/motd /workspace/x", timeout=10)
        with pytest.raises(SandboxOpError, match=r"Permission|denied|symbolic"):
            data = await sb.read_file("/workspace/notes.txt")
            pytest.fail(f"read through the agent's link: {data[:40]!r}")
        before = await sb.exec("md5sum /etc/motd; stat -c %U /etc/motd", user="root")
        with pytest.raises(SandboxOpError):
            await sb.write_file("/workspace/x", "owned\n")
        assert (await sb.exec("md5sum /etc/motd; stat -c %U /etc/motd", user="root")).stdout == before.stdout
        # The harness's own (root) writes refuse any link on the way.
        await sb.exec("mkdir -p /workspace/real && ln -s /etc /workspace/tests", timeout=10)
        with pytest.raises(SandboxOpError, match="symbolic link"):
            await sb.write_file("/workspace/tests/motd", "owned\n", user="root")
        with pytest.raises(SandboxOpError, match="symbolic link"):
            await sb.read_file("/workspace/notes.txt", user="root")
        # ...while ordinary files still work both ways.
        await sb.write_file("/workspace/real/ok.txt", "fine\n")
        assert await sb.read_file("/workspace/real/ok.txt") == b"fine\n"
        assert (await sb.exec("stat -c %U /workspace/real/ok.txt")).stdout.strip() != "root"


FIND_WRITABLE = (
    "find / \\( -path /proc -o -path /sys \\) -prune -o -type d -writable -print 2>/dev/null"
    ' | while read -r d; do echo planted > "$d/.planted" 2>/dev/null && echo "$d"; done'
)


async def test_nothing_the_agent_writes_survives_reset(agent_side):
    async with await agent_side.create(SMALL) as sb:
        planted = (await sb.exec(FIND_WRITABLE, timeout=60)).stdout.split()
        assert {"/workspace", "/tmp", "/var/tmp", "/dev/shm"} <= set(planted), planted
        await sb.reset()
        left = await sb.exec(
            r"find / \( -path /proc -o -path /sys \) -prune -o -name .planted -print 2>/dev/null", timeout=60
        )
        assert left.stdout.split() == []


async def test_disk_is_bounded_per_sandbox(agent_side):
    async with await agent_side.create(SMALL) as sb:
        res = await sb.exec(
            "dd if=/dev/zero of=/workspace/a bs=1M count=48; dd if=/dev/zero of=/workspace/b bs=1M count=48",
            timeout=60,
        )
        assert res.exit_code != 0 and "No space left" in res.stderr, res.output
        used = int((await sb.exec("du -sm /workspace | cut -f1")).stdout)
        assert used <= SMALL.limits.disk_mb
        assert (await sb.exec("dd if=/dev/zero of=/var/tmp/c bs=1M count=64", timeout=60)).exit_code != 0


async def test_memory_is_bounded_for_the_sandbox_as_a_whole(agent_side):
    async with await agent_side.create(SMALL) as sb:
        # three processes of 150 MB each: each under the 256 MB limit, together over it
        hog = "python3 -c 'import time; x = bytearray(150 * 2**20); x[::4096] = b\"x\" * len(x[::4096]); time.sleep(8)'"
        res = await sb.exec(f"{hog} & {hog} & {hog} & wait; echo done", timeout=60)
        ping = await sb.ping()
        assert ping["oom_kills"] > 0, (res.output, ping)


async def test_bwrap_backend_refuses_a_network(bwrap_backend):
    with pytest.raises(SandboxUnavailable, match="network"):
        await bwrap_backend.create(SMALL.model_copy(update={"network": True}))


async def test_server_survives_connection_floods_and_a_fork_bomb(agent_side):
    async with await agent_side.create(SMALL) as sb:
        flood = agent_python(
            "import socket\nn = 0\nfor _ in range(700):\n    s = socket.socket(socket.AF_UNIX)\n"
            "    try:\n        s.connect('/run/arborl/agent.sock'); n += 1\n    except OSError:\n        pass\nprint(n)"
        )
        assert (await sb.exec(flood, timeout=30)).stdout.strip() == "0"
        bomb = asyncio.create_task(sb.exec("bomb() { bomb | bomb & }; bomb; sleep 20", timeout=15))
        await asyncio.sleep(3)
        # a second harness connection while the bomb holds every pid of the sandbox
        ping = await asyncio.to_thread(asyncio.run, sb.ping(timeout=20))
        assert ping["pids"]["current"] <= SMALL.limits.pids
        await bomb
        await sb.reset()
        assert (await sb.exec("echo alive")).stdout == "alive\n"


async def _labelled(backend, pool_id: str) -> list[str]:
    infos = await asyncio.to_thread(backend.list_sandboxes)
    return [i.id for i in infos if i.labels.get("arborl.pool") == pool_id]


@pytest.mark.parametrize("moment", ["right-after-release", "during-reset", "after-crash"])
async def test_pool_close_leaves_nothing_running(backend, moment):
    pool = SandboxPool(backend, PoolConfig(max_size=2, reap_on_start=False, health_interval_s=0))
    async with pool.acquire(SMALL) as sb:
        assert await _labelled(backend, pool.id) == [sb.id]
        if moment == "during-reset":
            await sb.exec("for i in $(seq 50); do sleep 60 & done", timeout=10)  # a slower reset
        if moment == "after-crash":
            if backend.name == "docker":
                await asyncio.to_thread(sb.handle.kill)
            else:
                os.killpg(sb.handle[0].pid, 9)
    if moment == "during-reset":
        await asyncio.sleep(0.005)  # the background reset has begun
    await pool.close()  # for "right-after-release": before the background reset even starts
    assert await _labelled(backend, pool.id) == []


async def test_run_directories_cannot_hold_setuid_programs_or_fill_the_host(backend):
    async with await backend.create(SMALL) as sb:
        run_dir = Path(sb.channel.socket_path).parent
        flags = os.statvfs(run_dir).f_flag
        assert flags & os.ST_NOSUID and flags & os.ST_NOEXEC
        # even root in the sandbox (harness setup) cannot fill it
        res = await sb.exec("dd if=/dev/zero of=/run/arborl/fill bs=1M count=64", user="root", timeout=30)
        assert res.exit_code != 0 and "No space left" in res.stderr


async def test_root_in_the_sandbox_cannot_read_the_channel_key(backend):
    # Root commands are the harness's, but a task's setup may run files the agent wrote: even
    # then the key is nowhere to read (no file, no environment, a non-dumpable server).
    async with await backend.create(SMALL) as sb:
        server = (await sb.ping())["pid"]
        res = await sb.exec(
            "ls /run/arborl; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; "
            f"head -c 100 /proc/{server}/maps && echo MAPS-READ",
            user="root",
            timeout=30,
        )
        assert sb.channel._key.decode() not in res.stdout
        assert "key" not in res.stdout.split()
        assert "MAPS-READ" not in res.stdout and "Permission denied" in res.stderr, res.output


async def test_the_id_dropping_helper_is_read_only_and_useless_to_the_agent(agent_side):
    """Agent commands start through arborl-drop: nobody in the sandbox can replace it, and
    the agent running it gains nothing (it cannot switch ids, so it runs nothing)."""
    from arborl.sandboxes.drop_ids import IN_SANDBOX

    async with await agent_side.create(SMALL) as sb:
        res = await sb.exec(f"echo x >> {IN_SANDBOX}", user="root")
        assert res.exit_code != 0 and "Read-only" in res.stderr, res.output
        res = await sb.exec(["cp", "/bin/true", IN_SANDBOX], user="root")
        assert res.exit_code != 0, res.output
        res = await sb.exec(f"{IN_SANDBOX} 1 1 touch /tmp/ran; ls /tmp")
        assert "ran" not in res.stdout, res.output
        # and the server was told to start agent commands through it
        res = await sb.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '", user="root")
        assert "server.main" in res.stdout and f"--drop {IN_SANDBOX}" in res.stdout, res.output


async def test_a_fifo_where_the_harness_reads_or_writes_does_not_hang_it(agent_side):
    """A FIFO opens only when its other end does: the harness must refuse it, not wait."""
    async with await agent_side.create(SMALL) as sb:
        assert (await sb.exec("mkfifo /workspace/result.txt /workspace/hidden.py")).ok
        for op in (
            sb.read_file("/workspace/result.txt"),
            sb.read_file("/workspace/result.txt", user="root"),
            sb.write_file("/workspace/result.txt", "x"),
            sb.write_file("/workspace/result.txt", "x", user="root"),
            sb.upload({"hidden.py": "x = 1\n"}, "/workspace"),
        ):
            with pytest.raises(SandboxOpError, match="not a regular file"):
                await asyncio.wait_for(op, timeout=10)
        assert (await sb.exec("echo alive")).stdout == "alive\n"
