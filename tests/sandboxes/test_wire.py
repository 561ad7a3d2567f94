"""The channel's frame MACs (`server/wire.py`), on a real socket pair between two ends.

Each test plays the part of something between the harness and the server that does not
know the sandbox's key: it may change, drop, reorder, replay or reflect the bytes of sealed
frames, and the receiving end must refuse every one of them.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
import socket
import struct
import threading

import pytest

from arborl.sandboxes.server import wire

KEY = secrets.token_hex(32).encode()
NH, NS = secrets.token_hex(16), secrets.token_hex(16)
BIG = {"op": "upload", "tar": "x" * (3 * wire.SMALL_FRAME + 7)}  # takes the streamed path


def ends(key: bytes = KEY, nonces: tuple[str, str] = (NH, NS)) -> tuple[wire.Session, wire.Session]:
    """The harness's and the server's sessions of one connection."""
    return wire.Session(key, *nonces, wire.TO_SERVER), wire.Session(key, *nonces, wire.TO_HARNESS)


def _through_socket(write, read):
    """`read` from one end of a socket pair while `write` fills the other (frames can be
    larger than the socket's buffer)."""
    a, b = socket.socketpair()
    with a, b:

        def writer():
            with contextlib.suppress(OSError):  # the reader stops at a refused frame
                write(a)
                a.shutdown(socket.SHUT_WR)

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            return read(b)
        finally:
            b.shutdown(socket.SHUT_RD)
            thread.join()


def sealed(session: wire.Session | None, obj: dict) -> bytes:
    """The bytes of one frame as its sender puts them on the wire."""
    return _through_socket(
        lambda a: wire.send_frame(a, obj, session), lambda b: b"".join(iter(lambda: b.recv(1 << 20), b""))
    )


def receive(session: wire.Session, *frames: bytes) -> list[dict]:
    """What the receiving end makes of these bytes, frame after frame."""
    return _through_socket(
        lambda a: a.sendall(b"".join(frames)),
        lambda b: [wire.read_frame(b, wire.MAX_FRAME, session) for _ in frames],
    )


@pytest.mark.parametrize("obj", [{"op": "ping"}, BIG], ids=["small", "streamed"])
def test_frames_pass_both_ways_in_order(obj):
    harness, server = ends()
    requests = [sealed(harness, {**obj, "n": n}) for n in range(3)]
    assert receive(server, *requests) == [{**obj, "n": n} for n in range(3)]
    replies = [sealed(server, {"ok": True, "n": n, **obj}) for n in range(2)]
    assert receive(harness, *replies) == [{"ok": True, "n": n, **obj} for n in range(2)]


def test_a_frame_carries_a_keyed_blake2b_tag_over_direction_sequence_and_bytes():
    """The tag is what RFC 7693's keyed BLAKE2b gives under a key derived by HMAC-SHA256
    from both nonces, computed here from hashlib's primitives, not from `wire`."""
    harness, _ = ends()
    sealed(harness, {"op": "ping"})
    frame = sealed(harness, {"op": "exec", "cmd": "true"})
    body, tag = frame[4:-32], frame[-32:]
    assert struct.unpack(">I", frame[:4])[0] == len(body)
    session_key = hmac.new(KEY, f"arborl-session-v3|{NH}|{NS}".encode(), hashlib.sha256).digest()
    expected = hashlib.blake2b(
        struct.pack(">QI", 1, len(body)) + body, key=session_key, digest_size=32, person=b"harness->server"
    ).digest()
    assert tag == expected


@pytest.mark.parametrize("where", ["body", "tag", "length"])
@pytest.mark.parametrize("obj", [{"op": "exec", "cmd": "exit 1"}, BIG], ids=["small", "streamed"])
def test_a_changed_byte_is_refused(where, obj):
    harness, server = ends()
    frame = bytearray(sealed(harness, obj))
    if where == "length":  # one byte fewer: the tag no longer falls where it was
        frame[:4] = struct.pack(">I", len(frame) - 4 - 32 - 1)
    else:
        frame[{"body": 10, "tag": -1}[where]] ^= 1
    with pytest.raises(wire.Forged):
        receive(server, bytes(frame))


def test_a_replayed_frame_is_refused():
    harness, server = ends()
    first = sealed(harness, {"op": "exec", "cmd": "echo first"})
    with pytest.raises(wire.Forged, match="frame 1 of harness->server"):
        receive(server, first, first)


def test_frames_out_of_order_are_refused():
    harness, server = ends()
    first, second = sealed(harness, {"n": 1}), sealed(harness, {"n": 2})
    with pytest.raises(wire.Forged, match="frame 0"):
        receive(server, second, first)


def test_a_dropped_frame_is_noticed_at_the_next():
    harness, server = ends()
    sealed(harness, {"n": 1})
    with pytest.raises(wire.Forged):
        receive(server, sealed(harness, {"n": 2}))


def test_a_frame_sent_back_to_its_sender_is_refused():
    """Reflection: same key, same sequence number, the other direction."""
    harness, server = ends()
    request = sealed(harness, {"ok": True, "exit_code": 0})
    with pytest.raises(wire.Forged, match="server->harness"):
        receive(harness, request)
    assert receive(server, request) == [{"ok": True, "exit_code": 0}]


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(lambda: ends(nonces=(NH, secrets.token_hex(16)))[0], id="another-connection"),
        pytest.param(lambda: ends(key=secrets.token_hex(32).encode())[0], id="another-key"),
    ],
)
def test_a_frame_of_another_session_is_refused(other):
    _, server = ends()
    with pytest.raises(wire.Forged):
        receive(server, sealed(other(), {"op": "exec", "cmd": "id"}))


def test_an_unsealed_frame_is_refused_where_a_sealed_one_is_due():
    """Frames as the protocol before MACs sent them: what follows is read as the tag."""
    _, server = ends()
    plain = sealed(None, {"op": "exec", "cmd": "id", "pad": "x" * 40})
    with pytest.raises(wire.Forged):
        receive(server, plain, plain)


@pytest.mark.parametrize("nonce", ["", "ab" * 16 + "|x", "AB" * 16, "g" * 32, "a" * 31, None, 7])
def test_only_fixed_length_hex_nonces_are_accepted(nonce):
    assert wire.valid_nonce(secrets.token_hex(16)) and not wire.valid_nonce(nonce)
