"""The harness's side of the game server (`worker.py`): one server per harness process,
started on first use; one connection, and so one forked game process, per episode."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from arborl.sandboxes import SandboxError

#: What the env reads from TextWorld's game state every step (besides what the agent asks to see).
ALWAYS = ("feedback", "description", "inventory", "score", "max_score", "won", "lost", "moves")
#: How long the server may take to import TextWorld and listen (a loaded machine is slow).
SERVER_START_S = 120.0
WORKER = Path(__file__).with_name("worker.py")
_lock = threading.Lock()
_server: tuple[int, subprocess.Popen[bytes], str] | None = None  # (owner pid, process, socket path)


class GameCrashed(SandboxError):
    """The game failed to load, died, or stopped answering: an infrastructure error (the
    episode is retried or left out, never scored 0). Check the game file, the `textworld`
    install (`python envs/textworld/worker.py SOCKET GAME` must start), and the machine's memory."""

    fault = "infra"
    fatal = True


def server_socket(warm_game: str) -> str:
    """The game server's socket, starting the server first if this process has none (it
    loads `warm_game` once before it listens)."""
    global _server
    with _lock:
        if _server is None or _server[0] != os.getpid() or _server[1].poll() is not None:
            folder = tempfile.mkdtemp(prefix="arborl-textworld-")  # 0700: only this user connects
            path = os.path.join(folder, "games.sock")
            proc = subprocess.Popen(
                [sys.executable, str(WORKER), path, warm_game],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            ready = _readline(proc, SERVER_START_S)
            if ready != b"ready\n":
                proc.kill()
                raise GameCrashed(
                    f"the TextWorld game server did not start (said {ready!r}, exit {proc.poll()})"
                )
            _server = (os.getpid(), proc, path)
            atexit.register(_stop, proc, folder)
        return _server[2]


def _readline(proc: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    out: list[bytes] = []
    reader = threading.Thread(
        target=lambda: out.append(proc.stdout.readline() if proc.stdout else b""), daemon=True
    )
    reader.start()
    reader.join(timeout_s)
    return out[0] if out else b""


def _stop(proc: subprocess.Popen[bytes], folder: str) -> None:
    proc.kill()
    proc.wait(timeout=10)
    shutil.rmtree(folder, ignore_errors=True)


def _parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


class GameProcess:
    """One game in a process of its own, with a scratch folder as its working directory."""

    def __init__(self, game_file: str, fields: tuple[str, ...], timeout_s: float) -> None:
        self.game_file, self.fields, self.timeout_s = game_file, fields, timeout_s
        self._workdir = tempfile.mkdtemp(prefix="arborl-textworld-episode-")
        self._pid: int | None = None
        self._server_pid: int | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def start(self) -> dict[str, Any]:
        """Fork the game's process and load the game; its first state."""
        path = await asyncio.to_thread(server_socket, self.game_file)
        self._server_pid = _server[1].pid if _server is not None else None
        try:
            self._reader, self._writer = await asyncio.open_unix_connection(path, limit=1 << 24)
        except OSError as e:
            raise GameCrashed(f"cannot reach the TextWorld game server: {e}") from e
        reply = await self._request(
            {"game_file": self.game_file, "fields": list(self.fields), "workdir": self._workdir}
        )
        self._pid = int(reply["pid"])
        return dict(reply["state"])

    async def step(self, command: str) -> dict[str, Any]:
        """Play one command; the game's state after it."""
        return dict((await self._request({"command": command}))["state"])

    def close(self) -> None:
        """Kill the game's process (it holds nothing worth saving); remove its scratch folder."""
        if self._writer is not None:
            self._writer.close()
        if self._pid is not None and _parent_of(self._pid) == self._server_pid:
            # the parent check: a game that exited on its own may have had its pid reused
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
        shutil.rmtree(self._workdir, ignore_errors=True)

    async def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self._reader is not None and self._writer is not None
        try:
            self._writer.write(json.dumps(message).encode() + b"\n")
            await self._writer.drain()
            line = await asyncio.wait_for(self._reader.readline(), self.timeout_s)
        except TimeoutError as e:
            raise GameCrashed(f"the game did not answer within {self.timeout_s:g} s") from e
        except (OSError, ValueError) as e:
            raise GameCrashed(f"the game's connection failed: {type(e).__name__}: {e}") from e
        if not line:
            raise GameCrashed("the game's process died")
        reply = json.loads(line)
        if "error" in reply:
            raise GameCrashed(str(reply["error"]))
        return dict(reply)
