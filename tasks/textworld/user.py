"""A user's TextWorld games as a suite (`arborl eval suite=FOLDER` or `suite=GAME.z8`).

A game is what `tw-make` (or `textworld.generator.compile_game`) writes: the compiled game
`NAME.z8` and TextWorld's description of it `NAME.json` beside it (world, quests, metadata),
which TextWorld needs to report score, won and lost, and which holds the walkthrough. Games
are found by their content, searched recursively: a Z-machine story file (its header), a
JSON object with TextWorld's `world`, `quests` and `infos`. What cannot be played is refused
when the suite loads, all problems at once: a story without its `.json` (a game not made by
TextWorld: nothing would score it), a `.json` without its `.z8`, a Glulx game (`.ulx`, which
TextWorld dropped in 1.7; arborl runs 1.7), a story not named `.z8` (TextWorld reads the
`.json` of `.z8` games only).

Tasks are named by the game's path in the folder without its suffix (`sub/game`). The gold
policy plays the walkthrough (the `.json` metadata's, as tw-make writes it, else the one
TextWorld derives from the quests: `textworld.Game.walkthrough`); a game with neither has no
gold policy, and evaluation records its gold run as an environment error of that game
(`NoWalkthrough`), never a 0. The empty policy looks around. The turn budget is
`max(50, 2 x the longest walkthrough)`.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

from ..common import Policy
from ..suites import Suite, SuiteError
from .games import TextWorldTask
from .policies import IDLE

#: The least turn budget of a folder (the longest built-in suite's, textworld-cooking).
MIN_TURNS = 50
GAME_KEYS = frozenset({"world", "quests", "infos"})


class NoWalkthrough(RuntimeError):
    """A game has no walkthrough to play: the game, not the agent, is the problem."""

    environment_broken = True


def story_kind(path: Path) -> str | None:
    """`"zmachine"` or `"glulx"` when the file is a story file by its header, else None."""
    try:
        with path.open("rb") as f:
            head = f.read(64)
        size = path.stat().st_size
    except OSError:
        return None
    if head[:4] == b"Glul":
        return "glulx"
    if len(head) == 64 and 1 <= head[0] <= 8:
        scale = 2 if head[0] <= 3 else 4 if head[0] <= 5 else 8
        declared = int.from_bytes(head[0x1A:0x1C], "big") * scale
        if 64 <= declared <= size:  # the header's file length (the file may be padded)
            return "zmachine"
    return None


def game_json(path: Path) -> dict[str, Any] | None:
    """TextWorld's game description in the file, or None if it holds something else."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and data.keys() >= GAME_KEYS else None


def _files(path: Path) -> list[Path]:
    if path.is_file():  # one game: the file and its other half
        pair = [p for p in (path.with_suffix(".z8"), path.with_suffix(".json")) if p.is_file()]
        return pair if path in pair else [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and not any(s.startswith(".") for s in p.parts))


def has_games(path: Path) -> bool:
    """Whether the file or folder holds a story file or a TextWorld game description."""
    return any(
        game_json(p) is not None if p.suffix == ".json" else story_kind(p) is not None for p in _files(path)
    )


def find_games(path: Path) -> list[Path]:
    """The `.z8` games of a folder (or the one game a `.z8`/`.json` file is); SuiteError
    lists every game that cannot be played and why."""
    stories, descriptions, problems = set(), set(), []
    for p in _files(path):
        if p.suffix == ".json":
            if game_json(p) is not None:
                descriptions.add(p.with_suffix(""))
        elif (kind := story_kind(p)) == "glulx":
            problems.append(f"{p}: a Glulx game; TextWorld 1.7 plays Z-machine games only (.z8, tw-make's)")
        elif kind == "zmachine":
            if p.suffix != ".z8":
                problems.append(
                    f"{p}: a Z-machine story not named .z8; TextWorld reads the .json of .z8 games only"
                )
            else:
                stories.add(p.with_suffix(""))
    for stem in sorted(stories - descriptions):
        problems.append(
            f"{stem}.z8: no TextWorld {stem.name}.json beside it (tw-make writes both); it holds the score"
        )
    for stem in sorted(descriptions - stories):
        problems.append(f"{stem}.json: a TextWorld game description without its compiled game {stem.name}.z8")
    if problems:
        raise SuiteError("TextWorld games that cannot be played:\n  " + "\n  ".join(problems))
    games = sorted(stem.with_suffix(".z8") for stem in stories & descriptions)
    if not games:
        raise SuiteError(f"{path}: no TextWorld games (a .z8 with the .json tw-make writes beside it)")
    return games


def walkthrough_of(game: Path) -> list[str]:
    """The game's walkthrough: its metadata's, else TextWorld's from the quests ([]: none)."""
    data = game_json(game.with_suffix(".json")) or {}
    steps = (data.get("metadata") or {}).get("walkthrough")
    if not steps and data.get("quests"):
        import textworld

        steps = textworld.Game.load(str(game.with_suffix(".json"))).walkthrough
    return [str(s) for s in steps or []]


def load_games(path: Path) -> list[TextWorldTask]:
    """One task per game, its walkthrough in its metadata."""
    root = path if path.is_dir() else path.parent
    return [
        TextWorldTask(
            id=str(game.relative_to(root).with_suffix("")),
            game_file=str(game.resolve()),
            metadata={"suite": str(path), "walkthrough": walkthrough_of(game)},
        )
        for game in find_games(path)
    ]


def gold_policy(task: TextWorldTask) -> Policy:
    """Plays the walkthrough, one command a turn, then looks around."""
    steps = list(task.metadata.get("walkthrough") or [])
    if not steps:
        raise NoWalkthrough(
            f"{task.game_file}: no walkthrough in its .json and none TextWorld can derive from its quests"
        )

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        turn = sum(m.get("role") == "assistant" for m in messages)
        return steps[turn] if turn < len(steps) else IDLE

    return policy


def textworld_suite(name: str, path: Path) -> Suite:
    """The suite of the games at `path` (found and checked now)."""
    tasks = load_games(path)
    longest = max(len(t.metadata["walkthrough"]) for t in tasks)
    return Suite(
        name,
        "arborl/TextWorld-v0",
        partial(list, tasks),
        description=f"TextWorld games from {path}",
        gold="arborl.tasks.textworld.user:gold_policy",
        empty="arborl.tasks.textworld.policies:empty_policy",
        max_turns=max(MIN_TURNS, 2 * longest),
        tags=("textworld", "user"),
    )
