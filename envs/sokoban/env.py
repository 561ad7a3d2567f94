"""`arborl/Sokoban-v0`: Sokoban as verl-agent plays it with a language model, in pure Python.

    env = gymnasium.make("arborl/Sokoban-v0")
    obs, info = env.reset(options={"task": task})     # a SokobanTask (tasks/sokoban/)
    obs, reward, terminated, truncated, info = env.step("<think>...</think><action>up</action>")

Every turn the model gets one user message: verl-agent's prompt (`tasks.sokoban.prompt`)
around the room as its text grid (`game.render_grid`), with the last `history_length`
observations and moves from the second turn on. Its reply is read as verl-agent's projection
reads it and scored as verl-agent scores it (`tasks.sokoban.projection`: -0.1 a move, +1 a
box onto a target, -1 off one, +10 solved; -0.1 for no move; -0.1 more for an invalid
reply). An unreadable reply is the agent's mistake, scored so, never an exception. The
episode is `terminated` when the room is solved and `truncated` after `task.max_steps`
turns (verl-agent's env.max_steps, 15).

The state is the board, per episode; `state_hash` is the hash of the grid alone, so equal
boards in two episodes of a group are one anchor state (verl-agent's GiGPO anchors on the
observation, `'anchor': obs` in its SokobanEnvironmentManager).

`arborl/SokobanChat-v0` (`SokobanChatEnv`) is the same game for a harness that keeps the chat:
verl-agent's first prompt, then each turn the new board alone (`prompt.board_prompt`), since
the earlier boards and moves are already the chat's own turns. The rooms, the moves, the
reward and the anchors are the same; only the text of turns 2 on is shorter (about a tenth
of verl-agent's, which repeats the rules and the last two boards each turn), so a whole
15-turn episode fits one context of a small model and tree rollouts can share its turns.

`info` per step: `action` (the move played, "Still" for none), `is_action_valid` (verl-agent's
name), `format_error` (its negation), `action_is_effective` (the player moved), `won`,
`boxes_on_target`; at a cut: `truncated_by="max_steps"`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from arborl.tasks.sokoban.game import Board, render_grid
from arborl.tasks.sokoban.projection import INVALID_ACTION_PENALTY, project, turn_reward
from arborl.tasks.sokoban.prompt import HISTORY_LENGTH, board_prompt, first_prompt, prompt
from arborl.tasks.sokoban.task import SokobanTask

from ..base import Step, TextEnv, stable_hash

#: The room `reset()` plays without a task (what `check_env` gets).
DEFAULT_TASK = {"id": "sokoban-default", "rows": ["######", "#P_X_#", "#___O#", "######"]}


class SokobanEnv(TextEnv):
    """Sokoban as verl-agent runs it: a 6x6 text grid with one box, a move per reply, verl-agent's reward."""

    task_type: ClassVar[type[SokobanTask]] = SokobanTask
    default_task: ClassVar[Any] = DEFAULT_TASK

    def __init__(
        self,
        *,
        history_length: int = HISTORY_LENGTH,
        invalid_action_penalty: float = INVALID_ACTION_PENALTY,
        require_think: bool = True,
        render_mode: str | None = None,
        strict: bool = False,
    ) -> None:
        """`history_length`: past turns in each prompt (verl-agent's env.history_length);
        `invalid_action_penalty`: verl-agent's invalid_action_penalty_coef (0: its
        use_invalid_action_penalty=False); `require_think`: a reply without ``<think>`` tags
        is invalid, as verl-agent's projection has it."""
        super().__init__(render_mode=render_mode, strict=strict)
        self.history_length = history_length
        self.invalid_action_penalty = invalid_action_penalty
        self.require_think = require_think
        self.board: Board | None = None
        self.history: list[tuple[str, str]] = []

    async def on_reset(self, task: SokobanTask) -> str:
        self.board = task.board()
        self.history = []
        return first_prompt(render_grid(self.board))

    async def on_step(self, action: str) -> Step:
        assert self.board is not None  # on_reset ran: the base enforces reset before step
        task: SokobanTask = self.task
        move = project(action, self.require_think)
        before = self.board
        self.board, reward = turn_reward(before, move, self.invalid_action_penalty)
        self.history.append((render_grid(before), move.action_name))
        won = self.board.solved()
        cut = not won and self.turn + 1 >= task.max_steps
        info: dict[str, Any] = {
            "action": move.action_name,
            "is_action_valid": move.valid,
            "format_error": not move.valid,
            "action_is_effective": self.board.player != before.player,
            "won": won,
            "boxes_on_target": self.board.boxes_on_target(),
        }
        if cut:
            info["truncated_by"] = "max_steps"
        observation = self.observe(render_grid(self.board))
        return Step(observation, reward=reward, terminated=won, truncated=cut, info=info)

    def observe(self, grid: str) -> str:
        """A later turn's message: verl-agent's whole prompt with the recent history."""
        return prompt(grid, self.history, self.history_length)

    async def on_finish(self) -> tuple[float, dict[str, Any]]:
        return 0.0, {"won": self.board is not None and self.board.solved()}

    async def state_hash(self) -> str:
        return stable_hash(self.board.rows() if self.board is not None else None)


class SokobanChatEnv(SokobanEnv):
    """Sokoban for a chat that keeps its turns: verl-agent's first prompt, then the new board
    alone each turn (`history_length` does not apply: the chat holds the history)."""

    def observe(self, grid: str) -> str:
        return board_prompt(grid)
