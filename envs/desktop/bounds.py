"""Bounds on what the harness reads back from a desktop sandbox.

Everything the harness reads there (screenshots, accessibility trees, directory listings,
command output, files) is sized by what the agent did: its files, its windows, its apps. Each
read has a bound, and going past it is `OutputTooLarge`: in an evaluation the agent's
failure (score 0, with the reason in the details), in an observation an error note, never
an uncaught MemoryError in the harness.
"""

from __future__ import annotations

import zlib
from typing import Literal

from arborl.sandboxes import ExecResult


class OutputTooLarge(Exception):
    """What the sandbox gave back is larger than the harness reads (the agent's doing)."""


def gunzip_bounded(data: bytes, limit: int, what: str = "the data") -> bytes:
    """`data` (gzip) decompressed, raising OutputTooLarge past `limit` bytes (a gzip bomb
    costs at most `limit` bytes of memory) and ValueError when it is not one whole gzip stream."""
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(data, limit + 1)
    except zlib.error as e:
        raise ValueError(f"{what} is not gzip data: {e}") from None
    if len(out) > limit or inflate.unconsumed_tail:
        raise OutputTooLarge(f"{what} inflates to more than {limit} bytes")
    if not inflate.eof:
        raise ValueError(f"{what} is a truncated gzip stream")
    return out


def bounded_stream(r: ExecResult, stream: Literal["stdout", "stderr"], limit: int, what: str) -> str:
    """`r`'s stdout or stderr, run with `max_output=limit`; OutputTooLarge if it was cut."""
    if (r.stdout_bytes if stream == "stdout" else r.stderr_bytes) > limit:
        raise OutputTooLarge(f"{what}: its {stream} is larger than {limit} bytes, the most the harness reads")
    return r.stdout if stream == "stdout" else r.stderr
