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

`obs_type` chooses what the model is shown: `"text"` (verl-agent's text grid, the default),
`"image"` (the room drawn as an RGB image, `tasks.sokoban.picture`, with verl-agent's visual
prompt: its multimodal Sokoban) or `"both"` (the image, then the text prompt). An image turn's
message is a list of parts, ``[{"type": "image", "image": uint8 [H, W, 3]}, {"type": "text",
...}]`` (`arborl.envs.images`), and the observation space admits it (`ContentSpace`).

`info` per step: `action` (the move played, "Still" for none), `is_action_valid` (verl-agent's
name), `format_error` (its negation), `action_is_effective` (the player moved), `won`,
`boxes_on_target`; at a cut: `truncated_by="max_steps"`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from arborl.tasks.sokoban.game import Board, render_grid
from arborl.tasks.sokoban.picture import CELL_PX, VISUAL_BOARD_PROMPT, VISUAL_TEMPLATE, render_image
from arborl.tasks.sokoban.projection import INVALID_ACTION_PENALTY, project, turn_reward
from arborl.tasks.sokoban.prompt import HISTORY_LENGTH, board_prompt, first_prompt, prompt
from arborl.tasks.sokoban.task import SokobanTask

from ..base import Step, TextEnv, stable_hash
from ..images import OBS_TYPES, ImageBounds, ObsType, image_part, multimodal_observation_space, text_part

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
        obs_type: ObsType = "text",
        cell_px: int = CELL_PX,
        image_bounds: ImageBounds | None = None,
    ) -> None:
        """`history_length`: past turns in each prompt (verl-agent's env.history_length);
        `invalid_action_penalty`: verl-agent's invalid_action_penalty_coef (0: its
        use_invalid_action_penalty=False); `require_think`: a reply without ``<think>`` tags
        is invalid, as verl-agent's projection has it. `obs_type`: text | image | both (module
        doc); `cell_px`: pixels per cell of the image; `image_bounds`: its largest side (a
        larger room is shrunk, or refused with `oversize="refuse"`)."""
        super().__init__(render_mode=render_mode, strict=strict)
        if obs_type not in OBS_TYPES:
            raise ValueError(f"obs_type must be one of {OBS_TYPES}, got {obs_type!r}")
        self.obs_type = obs_type
        self.cell_px = cell_px
        self.image_bounds = image_bounds or ImageBounds(max_side=1024, max_images=1)
        if obs_type != "text":
            self.observation_space = multimodal_observation_space(self.image_bounds)
        self.history_length = history_length
        self.invalid_action_penalty = invalid_action_penalty
        self.require_think = require_think
        self.board: Board | None = None
        self.history: list[tuple[str, str]] = []

    async def on_reset(self, task: SokobanTask) -> str:
        self.board = task.board()
        self.history = []
        return self.message(first_prompt(render_grid(self.board)), VISUAL_TEMPLATE)

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
        observation = self.message(self.observe(render_grid(self.board)), self.observe_visual())
        return Step(observation, reward=reward, terminated=won, truncated=cut, info=info)

    def observe(self, grid: str) -> str:
        """A later turn's message: verl-agent's whole prompt with the recent history."""
        return prompt(grid, self.history, self.history_length)

    def observe_visual(self) -> str:
        """A later turn's words beside the image (verl-agent's visual prompt, every turn)."""
        return VISUAL_TEMPLATE

    def message(self, text: str, visual: str) -> str | list[dict[str, Any]]:
        """The turn's user message: `text` (the grid prompt), or the image with `visual` (its
        prompt without the grid), or the image with `text`."""
        if self.obs_type == "text":
            return text
        assert self.board is not None
        image = image_part(render_image(self.board, self.cell_px), self.image_bounds)
        words = visual if self.obs_type == "image" else text
        return [{"role": "user", "content": [image, text_part(words)]}]

    async def on_finish(self) -> tuple[float, dict[str, Any]]:
        return 0.0, {"won": self.board is not None and self.board.solved()}

    async def state_hash(self) -> str:
        return stable_hash(self.board.rows() if self.board is not None else None)


class SokobanChatEnv(SokobanEnv):
    """Sokoban for a chat that keeps its turns: verl-agent's first prompt, then the new board
    alone each turn (`history_length` does not apply: the chat holds the history)."""

    def observe(self, grid: str) -> str:
        return board_prompt(grid)

    def observe_visual(self) -> str:
        return VISUAL_BOARD_PROMPT
