"""The game server: `python worker.py SOCKET GAME` imports TextWorld once, then forks one
process per episode (a forking Unix-socket server). It imports nothing of arborl (it is run
by path), so it starts in the time TextWorld takes to import.

The interpreter (Jericho's frotz, a C library) runs in that episode process and never in the
harness: a game that crashes takes only its own process down, frotz's memory goes back to the
system with the process, and the game's own file commands (`save`, `script`) write into the
episode's scratch folder, which is removed with it. Importing TextWorld takes seconds, forking
the server milliseconds, hence the server. It plays GAME once before it listens, and each new
game once before forking its first episode, so what TextWorld builds on a game's first load
(parsers, the challenge's knowledge base: seconds) is built once, not in every episode; the
episodes start from a copy of that read-only state, never from another episode's. It exits when its stdin closes (its parent is gone),
and its episode processes with it (a harness killed outright never closes its episodes, and a
game whose interpreter hangs would run on without end). An episode's stderr is /dev/null: a
hung dumb-frotz prints its complaint again and again, without end, into whatever stderr it
has; the harness hears of every failure on the episode's connection.

Protocol, one JSON object a line on the episode's connection:

    harness → game:  {"game_file": ..., "fields": [...], "workdir": ...}, then {"command": "go north"}, ...
    game → harness:  {"pid": N, "state": {...}} once loaded, then {"state": {...}} a command;
                     {"error": "..."} when loading or a command failed (the process then exits)
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socketserver
import sys
import tempfile
import threading
from typing import Any

import textworld


def _state(state: Any, fields: list[str]) -> dict[str, Any]:
    out = {k: state.get(k) for k in fields}
    if "admissible_commands" in fields:
        out["admissible_commands"] = list(state.get("admissible_commands") or [])
    return out


#: prctl's option to have the kernel signal this process when its parent exits (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def _die_with(server_pid: int) -> None:
    """Have the kernel kill this process when the server exits; exit now if it already has."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server_pid:
        os._exit(0)


class Episode(socketserver.StreamRequestHandler):
    """One episode, in the forked process: load the game, then play commands until EOF."""

    def setup(self) -> None:
        _die_with(self.server.pid)  # type: ignore[attr-defined]
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        super().setup()

    def send(self, reply: dict[str, Any]) -> None:
        self.wfile.write(json.dumps(reply).encode() + b"\n")
        self.wfile.flush()

    def handle(self) -> None:
        try:
            setup = json.loads(self.server.setup_line)  # type: ignore[attr-defined]
            os.chdir(setup["workdir"])
            fields = list(setup["fields"])
            env = textworld.start(
                setup["game_file"], request_infos=textworld.EnvInfos(**dict.fromkeys(fields, True))
            )
            self.send({"pid": os.getpid(), "state": _state(env.reset(), fields)})
        except Exception as e:
            self.send({"error": f"loading the game failed: {type(e).__name__}: {e}"})
            return
        for line in self.rfile:
            command = str(json.loads(line)["command"])
            try:
                state, _, _ = env.step(command)
            except Exception as e:
                self.send({"error": f"the game failed on {command!r}: {type(e).__name__}: {e}"})
                return
            self.send({"state": _state(state, fields)})


class Server(socketserver.ForkingMixIn, socketserver.UnixStreamServer):
    max_children = 4096  # one per running episode; the mixin's default (40) would stall a big batch
    request_queue_size = 1024  # episodes that start at once (the default, 5, resets the rest)
    setup_line = b""
    #: Games the server has loaded itself. What TextWorld builds on a first load depends on the
    #: game's challenge (its knowledge base): one warm-up per game, bounded, before forking.
    warmed: set[str] = set()  # noqa: RUF012 - one server per process
    pid = os.getpid()
    WARM_MAX = 256

    def process_request(self, request: Any, client_address: Any) -> None:
        """Read the episode's setup here, warm up on its game if new, then fork (the child
        starts from the warmed state and reads the setup from `setup_line`)."""
        request.settimeout(30)
        try:
            self.setup_line = _read_line(request)
            game_file = str(json.loads(self.setup_line)["game_file"])
        except (OSError, ValueError, KeyError, TypeError):
            self.shutdown_request(request)
            return
        request.settimeout(None)
        if game_file not in self.warmed and len(self.warmed) < self.WARM_MAX:
            self.warmed.add(game_file)
            _warm_up(game_file)
        super().process_request(request, client_address)


def _read_line(sock: Any) -> bytes:
    """One line from a socket, read a byte at a time (nothing after it is consumed: the
    forked child reads the rest)."""
    out = bytearray()
    while not out.endswith(b"\n"):
        byte = sock.recv(1)
        if not byte:
            raise OSError("connection closed before the setup line")
        out += byte
    return bytes(out)


def _exit_with_parent() -> None:
    sys.stdin.read()
    os._exit(0)


def _warm_up(game_file: str) -> None:
    fields = ("feedback", "description", "inventory", "score", "max_score", "admissible_commands")
    home = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="arborl-textworld-warm-") as scratch:
        os.chdir(scratch)
        try:
            env = textworld.start(game_file, request_infos=textworld.EnvInfos(**dict.fromkeys(fields, True)))
            env.reset()
            env.step("look")
            env.close()
        except Exception as e:  # the episodes will say what is wrong with the game
            print(f"warm-up on {game_file} failed: {type(e).__name__}: {e}", file=sys.stderr)
        finally:
            os.chdir(home)


def main(path: str, warm_game: str) -> None:
    _warm_up(warm_game)
    Server.warmed.add(warm_game)
    with Server(path, Episode) as server:
        threading.Thread(target=_exit_with_parent, daemon=True).start()
        print("ready", flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
