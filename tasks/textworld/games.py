"""TextWorld games from fixed challenge settings and seeds, generated once into a cache.

A `TextWorldTask` names a challenge (`tw-coin_collector`, `tw-treasure_hunter`, `tw-cooking`,
`tw-simple`), its `tw-make` arguments and a seed; `ensure_game` returns the compiled game
(`game.z8` with TextWorld's `game.json` beside it), generating it the first time with the
challenge's own generator, as `tw-make <challenge> <args> --seed <seed>` does. Generation takes
seconds of CPU per game (the challenge's knowledge base, then the Inform 7 compiler), so the
result is kept under `$ARBORL_CACHE/textworld` (default `~/.cache/arborl/textworld`), keyed
by the spec and TextWorld's version; concurrent callers wait on a file lock.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from ..task_types import Task

Challenge = Literal["tw-coin_collector", "tw-treasure_hunter", "tw-cooking", "tw-simple"]
CHALLENGES: tuple[str, ...] = ("tw-coin_collector", "tw-treasure_hunter", "tw-cooking", "tw-simple")
GAME_FILE, GAME_JSON = "game.z8", "game.json"
_generating = threading.Lock()  # TextWorld's generators keep module-level state


class GameError(RuntimeError):
    """A game could not be generated or read: an installation problem, not the agent's."""


class TextWorldTask(Task):
    """One TextWorld game: a challenge, its settings and a seed, or a compiled game file."""

    kind: Literal["textworld"] = "textworld"
    challenge: Challenge | None = Field(None, description="the tw-make challenge that generates the game")
    args: tuple[str, ...] = Field((), description="the challenge's tw-make arguments, e.g. ('--level', '5')")
    seed: int = Field(0, ge=0, description="tw-make's --seed")
    game_file: str | None = Field(
        None, description="a compiled game (.z8 with TextWorld's .json beside it) instead of a challenge"
    )

    @model_validator(mode="after")
    def _one_source(self) -> TextWorldTask:
        if (self.challenge is None) == (self.game_file is None):
            raise ValueError("give either `challenge` (with args and seed) or `game_file`")
        return self


def cache_root() -> Path:
    return Path(os.environ.get("ARBORL_CACHE", Path.home() / ".cache" / "arborl")) / "textworld"


def textworld_version() -> str:
    try:
        return version("textworld")
    except PackageNotFoundError as e:
        raise GameError("textworld is not installed: run scripts/setup.sh (or pip install textworld)") from e


def game_key(task: TextWorldTask) -> str:
    """The cache folder of a generated game: the challenge and a hash of what generates it."""
    spec = json.dumps([task.challenge, list(task.args), task.seed, textworld_version()])
    return f"{task.challenge}-{hashlib.sha256(spec.encode()).hexdigest()[:16]}"


def ensure_game(task: TextWorldTask, root: Path | None = None) -> Path:
    """The path of the task's compiled game, generating it first if needed."""
    if task.game_file is not None:
        path = Path(task.game_file)
        if not path.is_file() or not path.with_suffix(".json").is_file():
            raise GameError(f"{path}: no such game, or no TextWorld .json beside it (tw-make writes both)")
        return path
    folder = (root or cache_root()) / game_key(task)
    if (folder / GAME_FILE).is_file():
        return folder / GAME_FILE
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / GAME_FILE).is_file():
            _generate(task, folder)
    return folder / GAME_FILE


def game_metadata(task: TextWorldTask, root: Path | None = None) -> dict[str, Any]:
    """TextWorld's metadata of the game (walkthrough, objective, ...), from its .json."""
    path = ensure_game(task, root).with_suffix(".json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise GameError(f"{path}: not a TextWorld game description: {e}") from e
    return {**data.get("metadata", {}), "objective": data.get("objective", "")}


def _generate(task: TextWorldTask, folder: Path) -> None:
    """Run the challenge's generator and compiler into a scratch folder, then move it in place,
    so a reader never sees half a game."""
    try:
        import textworld
        import textworld.challenges
        from textworld.generator import compile_game
    except ImportError as e:
        raise GameError(f"textworld cannot be imported ({e}): run scripts/setup.sh") from e
    _, make, add_arguments = textworld.challenges.CHALLENGES[task.challenge]
    parser = argparse.ArgumentParser(prog=f"tw-make {task.challenge}", exit_on_error=False)
    add_arguments(parser)
    try:
        settings = vars(parser.parse_args(list(task.args)))
    except (argparse.ArgumentError, SystemExit) as e:
        raise GameError(f"{task.id}: bad {task.challenge} arguments {list(task.args)}: {e}") from e
    scratch = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
    try:
        options = textworld.GameOptions()
        options.seeds = task.seed
        options.path = str(scratch / GAME_FILE)
        options.force_recompile = True
        with _generating:
            game = make(settings=settings, options=options)
            compile_game(game, options)
        os.replace(scratch, folder)
    except Exception as e:
        raise GameError(
            f"{task.id}: generating the {task.challenge} game failed: {type(e).__name__}: {e}"
        ) from e
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
