"""`arborl/TextWorld-v0`: a TextWorld game, one command a turn, scored by the game.

    env = gymnasium.make("arborl/TextWorld-v0", admissible_commands=True, description=False)
    obs, info = env.reset(options={"task": TextWorldTask(...)})   # a suite's task
    obs, reward, terminated, truncated, info = env.step("<action>go north</action>")

Observation: the game's own text, as TextWorld's agents get it from `textworld.start` with
`EnvInfos`: the feedback of the command, then (when asked for) the room description, the
inventory and the admissible commands, which is what verl-agent and TextWorld's baselines put
in the prompt. Action: the text inside the reply's last ``<action>...</action>``, else the
reply's last non-empty line (printable ASCII but the backslash, anything else made a space; at most 256 characters). A command the game does not understand is the agent's mistake:
the game's own answer ("That's not a verb I recognise.") is the observation and the game
goes on.

Reward: the game's score, normalised by its maximum: each step earns the points it scored
divided by `max_score`, so an episode's rewards add up to score / max_score, 1.0 exactly when
the game is won. `terminated` when the game says it is won or lost.

Each episode runs its game in a process of its own (`process.py`); a game that fails to load,
dies or hangs raises `GameCrashed`, an infrastructure error, never a score of 0.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, ClassVar

from arborl.tasks.textworld import GameError, TextWorldTask, ensure_game

from ..base import Step, TextEnv, stable_hash
from .process import ALWAYS, GameCrashed, GameProcess

SYSTEM_PROMPT = (
    "You are playing a text adventure game. Each turn, send the game one command, such as "
    "`go north`, `open door`, `take key from table` or `inventory`. You may think first; "
    "then put the command inside <action></action> tags, e.g. <action>go north</action>."
)
MAX_COMMAND = 256
_ACTION = re.compile(r"<action>(.*?)</action>", re.S | re.I)
#: The default game used by `check_env`: the smallest coin-collector game.
DEFAULT_TASK = TextWorldTask(id="coin-l1-0", challenge="tw-coin_collector", args=("--level", "1"), seed=0)


def parse_command(reply: str) -> str:
    """The game command in a model reply (see the module doc), as the game can take it:
    printable ASCII, every other character a space, at most `MAX_COMMAND` characters. The
    agent's text must not be able to end its episode as an infrastructure failure, and each of
    these did: frotz reads a C string, and a NUL killed the game; dumb-frotz, the interpreter,
    reads a line that starts with a backslash as a command of its own and then waits for input
    the game never gets; and it cuts a command at 198 bytes, which inside a character of more
    than one byte left TextWorld an undecodable reply. TextWorld's games are in ASCII English:
    no command of theirs needs another character."""
    tagged = _ACTION.findall(reply)
    if tagged:
        text = tagged[-1]
    else:
        lines = [line for line in reply.splitlines() if line.strip()]
        text = lines[-1] if lines else ""
    printable = "".join(c if " " <= c <= "~" and c != "\\" else " " for c in text)
    return " ".join(printable.split())[:MAX_COMMAND]


def render(state: dict[str, Any], shown: tuple[str, ...]) -> str:
    """The observation text of a game state: its feedback, then the `shown` extras."""
    parts = [str(state.get("feedback") or "").strip()]
    if "description" in shown:
        parts.append(f"Description:\n{str(state.get('description') or '').strip()}")
    if "inventory" in shown:
        parts.append(f"Inventory:\n{str(state.get('inventory') or '').strip()}")
    if "admissible_commands" in shown:
        commands = state.get("admissible_commands") or []
        parts.append("Admissible commands:\n" + "\n".join(f"- {c}" for c in commands))
    return "\n\n".join(parts)


class TextWorldEnv(TextEnv):
    """TextWorld games: the game's text in, a command per reply, the game's own score."""

    task_type = TextWorldTask
    default_task: ClassVar[Any] = DEFAULT_TASK

    def __init__(
        self,
        *,
        admissible_commands: bool = True,
        description: bool = False,
        inventory: bool = False,
        step_timeout_s: float = 60.0,
        render_mode: str | None = None,
        strict: bool = False,
    ) -> None:
        """`admissible_commands`, `description`, `inventory`: what the observation shows besides
        the game's feedback (TextWorld's `EnvInfos` of the same names). `step_timeout_s`: how
        long a game may take to answer before it counts as hung (an infrastructure error)."""
        super().__init__(render_mode=render_mode, strict=strict)
        self.shown = tuple(
            k
            for k, on in (
                ("description", description),
                ("inventory", inventory),
                ("admissible_commands", admissible_commands),
            )
            if on
        )
        self.step_timeout_s = step_timeout_s
        self._game: GameProcess | None = None
        self._state: dict[str, Any] = {}

    async def on_reset(self, task: TextWorldTask) -> list[dict[str, str]]:
        try:
            game_file = await asyncio.to_thread(ensure_game, task)
        except GameError as e:
            raise GameCrashed(str(e)) from e
        fields = tuple(dict.fromkeys((*ALWAYS, *self.shown)))
        self._game = GameProcess(str(game_file), fields, self.step_timeout_s)
        self._state = await self._game.start()
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": self._text()}]

    async def on_step(self, action: str) -> Step:
        if self._game is None:
            raise GameCrashed("no game is running")
        command = parse_command(action)
        before = self._state
        self._state = await self._game.step(command)
        max_score = float(self._state.get("max_score") or 1)
        gained = float(self._state.get("score") or 0) - float(before.get("score") or 0)
        won, lost = bool(self._state.get("won")), bool(self._state.get("lost"))
        admissible = before.get("admissible_commands")
        info = {
            "command": command,
            "admissible": None if admissible is None else command in admissible,
            "score": self._state.get("score"),
            "max_score": self._state.get("max_score"),
            "won": won,
            "lost": lost,
            # what may be typed next, as reset's info gives it (None when not requested)
            "admissible_commands": self._admissible(),
        }
        return Step(self._text(), reward=gained / max_score, terminated=won or lost, info=info)

    async def state_hash(self) -> str:
        """The game state the player can see: where they are, what they carry, the score."""
        s = self._state
        return stable_hash([self.task_id, s.get("description"), s.get("inventory"), s.get("score")])

    def reset_info(self) -> dict[str, Any]:
        return {"max_score": self._state.get("max_score"), "admissible_commands": self._admissible()}

    def _admissible(self) -> list[str] | None:
        commands = self._state.get("admissible_commands")
        return None if commands is None else list(commands)

    def _text(self) -> str:
        return render(self._state, self.shown)

    def _holds_resources(self) -> bool:
        return self._game is not None

    def _end_episode(self, broken: bool = False) -> None:
        super()._end_episode(broken)
        if self._game is not None:
            self._game.close()
            self._game = None
