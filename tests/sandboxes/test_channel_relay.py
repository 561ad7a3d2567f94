"""A root process in the sandbox puts itself between the harness and the server.

The stand-in for an agent that gained root: it renames the server's socket, binds its own at
the original path and relays every connection to the real one. It cannot complete a
handshake of its own (no key), so it passes hello and auth on; these tests check that it
can then do nothing but pass frames on unchanged: an altered, replayed, spliced or reflected
frame makes the harness raise `SandboxCrashed` instead of returning what the relay made up,
and an altered request never runs. Each attack returned the forged result (or ran the
forged command) on the channel before frames carried MACs.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from arborl.sandboxes import Limits, SandboxCrashed, SandboxSpec
from arborl.sandboxes.server import wire

SMALL = SandboxSpec(limits=Limits(memory_mb=256, pids=128, max_file_mb=256, tmp_mb=16, disk_mb=64))

# The relay, as an attacker who knows the wire format would write it: frames are a 4-byte
# length and a JSON body, then a tag of TAG bytes on every frame after the hello pair.
RELAY = r"""
import os, socket, struct, sys, threading

RUN = "/run/arborl"
MODE, TAG = sys.argv[1], int(sys.argv[2])
saved = {}
log = open("/tmp/relay.log", "a", buffering=1)


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def frames(sock):
    n = 0
    while True:
        head = recv_exact(sock, 4)
        body = recv_exact(sock, struct.unpack(">I", head)[0])
        tag = recv_exact(sock, TAG) if n and TAG else b""
        yield n, head, body, tag
        n += 1


def attack(way, n, head, body, tag):
    # returns (frame to forward or None, frame to send back to the harness or None)
    frame = head + body + tag
    if n < 2:  # hello and auth, and their answers: passed on, or there is no connection
        return frame, None
    if MODE == "rewrite" and way == "reply":
        return head + body.replace(b'"exit_code": 1', b'"exit_code": 0') + tag, None
    if MODE == "rewrite-request" and way == "request":
        return head + body.replace(b"/tmp/asked", b"/tmp/forgd") + tag, None
    if MODE == "flip-" + way and len(body) > 65536:  # a large frame: one bit of its data
        return head + body.replace(b"AAAA", b"AAAB", 1) + tag, None
    if MODE == "replay" and way == "reply":
        saved.setdefault("first", frame)
        return saved["first"], None
    if MODE == "splice" and way == "reply":
        saved.setdefault(n, frame)  # the first connection's answers, in the later ones
        return saved[n], None
    if MODE == "reflect" and way == "request":
        return None, frame
    return frame, None


def pump(src, dst, back, way, conn_no):
    try:
        for n, head, body, tag in frames(src):
            forward, reflect = attack(way, n, head, body, tag)
            log.write(f"{conn_no} {way} {n} {len(body)}\n")
            if forward is not None:
                dst.sendall(forward)
            if reflect is not None:
                back.sendall(reflect)
    except (EOFError, OSError):
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


os.rename(RUN + "/agent.sock", RUN + "/real.sock")
srv = socket.socket(socket.AF_UNIX)
srv.bind(RUN + "/agent.sock")
srv.listen(16)
open(RUN + "/relay.ready", "w").close()
conn_no = 0
while True:
    client, _ = srv.accept()
    upstream = socket.socket(socket.AF_UNIX)
    upstream.connect(RUN + "/real.sock")
    threading.Thread(target=pump, args=(client, upstream, client, "request", conn_no), daemon=True).start()
    threading.Thread(target=pump, args=(upstream, client, None, "reply", conn_no), daemon=True).start()
    conn_no += 1
"""


async def start_relay(sb, mode: str) -> None:
    """Run the relay as root in the sandbox; back once it sits at the socket's path."""
    await sb.write_file("/tmp/relay.py", RELAY, user="root")
    tag = getattr(wire, "TAG_SIZE", 0)  # the format of the code under test
    res = await sb.exec(
        f"setsid python3 /tmp/relay.py {mode} {tag} >/tmp/relay.err 2>&1 </dev/null &",
        user="root",
        timeout=10,
    )
    assert res.exit_code == 0, res.output
    ready = Path(sb.channel.socket_path).parent / "relay.ready"
    deadline = time.monotonic() + 20
    while not ready.exists():
        assert time.monotonic() < deadline, (await sb.exec("cat /tmp/relay.err", user="root")).output
        await asyncio.sleep(0.05)


def through_relay(coro_fn):
    """Run `coro_fn()` on a new event loop: its requests open new connections, so they go
    through whatever now answers at the socket's path (the test's loop keeps a direct one)."""
    return asyncio.to_thread(asyncio.run, coro_fn())


async def relayed(sb) -> list[str]:
    """The frames the relay saw, one line each: connection, direction, index, body size."""
    return (await sb.exec("cat /tmp/relay.log", user="root")).stdout.splitlines()


async def test_an_honest_relay_goes_unnoticed(backend):
    """Passing frames on unchanged is all a relay can do, and then everything works."""
    blob = bytes(range(256)) * 4096  # 1 MiB: a frame over SMALL_FRAME both ways
    async with await backend.create(SMALL) as sb:
        await start_relay(sb, "honest")

        async def work():
            res = await sb.exec("echo relayed; exit 1")
            await sb.upload({"blob.bin": blob}, "/tmp")
            return res, await sb.read_file("/tmp/blob.bin"), await sb.exec("echo again")

        res, back, again = await through_relay(work)
        assert (res.exit_code, res.stdout, again.stdout) == (1, "relayed\n", "again\n")
        assert back == blob
        log = await relayed(sb)
        assert [line.split()[:3] for line in log if line.split()[1] == "request"] == [
            ["0", "request", str(n)] for n in range(6)
        ], log  # hello, auth and the four requests all went through the relay
        assert max(int(line.split()[3]) for line in log) > len(blob)


ATTACKS = {
    "rewrite": "rewrites a reply (exit code 1 becomes 0)",
    "replay": "answers the second request with the first one's reply",
    "splice": "answers a request with the reply of an earlier connection at the same place",
    "reflect": "sends the harness's own request back to it as the reply",
}


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_a_relay_cannot_forge_a_reply(backend, attack):
    async with await backend.create(SMALL) as sb:
        await start_relay(sb, attack)

        async def first_and_second():
            return await sb.exec("echo first; exit 1"), await sb.exec("echo second; exit 1")

        async def one(word):
            return await sb.exec(f"echo {word}; exit 1")

        with pytest.raises(SandboxCrashed, match=r"no longer trustworthy.*failed its tag"):
            if attack == "replay":
                got = await through_relay(first_and_second)
            elif attack == "splice":
                got = (await through_relay(lambda: one("first")), await through_relay(lambda: one("second")))
            else:
                got = await through_relay(lambda: one("real"))
            pytest.fail(f"the harness returned what the relay {ATTACKS[attack]}: {got!r}")
        # the relay really was in the way, and the sandbox's own server is untouched
        assert any(line.split()[1:3] == ["reply", "1"] for line in await relayed(sb))
        assert (await sb.exec("echo direct")).stdout == "direct\n"


async def test_a_relay_cannot_alter_a_request(backend):
    """The server drops a request that fails its tag: the altered command never runs."""
    async with await backend.create(SMALL) as sb:
        await start_relay(sb, "rewrite-request")
        with pytest.raises(SandboxCrashed):
            res = await through_relay(lambda: sb.exec("touch /tmp/asked"))
            pytest.fail(f"the server ran the relay's request: {res!r}")
        listing = (await sb.exec("ls /tmp", user="root")).stdout.split()
        assert "forgd" not in listing and "asked" not in listing, listing
        assert any(line.split()[1:3] == ["request", "2"] for line in await relayed(sb))


@pytest.mark.parametrize("way", ["reply", "request"])
async def test_a_relay_cannot_alter_a_large_frame(backend, way):
    """Frames over a few kilobytes are MACed piece by piece as they stream: one bit changed
    in a megabyte still fails (a reply raises, a request is dropped unrun)."""
    zeros = bytes(1 << 20)
    async with await backend.create(SMALL) as sb:
        await sb.write_file("/tmp/zeros", zeros)
        await start_relay(sb, f"flip-{way}")
        with pytest.raises(SandboxCrashed, match="failed its tag" if way == "reply" else None):
            if way == "reply":
                got = await through_relay(lambda: sb.read_file("/tmp/zeros"))
            else:
                got = await through_relay(lambda: sb.write_file("/tmp/sent", zeros))
            pytest.fail(f"a changed {way} went through: {got!r:.80}")
        assert "sent" not in (await sb.exec("ls /tmp")).stdout.split()
        assert any(int(line.split()[3]) > len(zeros) for line in await relayed(sb))
