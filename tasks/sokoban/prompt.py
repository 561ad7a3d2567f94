"""The text verl-agent shows its model on Sokoban: the prompt of every turn, and its history.

The two templates are verl-agent's, verbatim, typos included (it is the observation the
benchmark defines; agent_system/environments/prompts/sokoban.py, `SOKOBAN_TEMPLATE_NO_HIS`
and `SOKOBAN_TEMPLATE`, zhangyun04/verl-agent @ 24dda38, Apache-2.0). How they are filled is
its `SokobanEnvironmentManager.build_text_obs` (agent_system/environments/env_manager.py,
lines 204-235): the first turn gets the template without history; later turns the one with
the last `history_length` (verl-agent's env.history_length, 2 in its
verl/trainer/config/ppo_trainer.yaml, line 290) observations and the moves played from them,
each ``[Observation n: '<grid>', Action n: '<Up|Down|Left|Right|Still>']``, one a line
(agent_system/memory/memory.py, `SimpleMemory.fetch`, lines 73-82).
"""

from __future__ import annotations

from collections.abc import Sequence

HISTORY_LENGTH = 2

# The trailing space after "tags." is verl-agent's (written \x20 so editors keep it).

TEMPLATE_NO_HISTORY = """
You are an expert agent operating in the Sokoban environment.

# Symbols and Their Meaning
- Walls (`#`): These block movement. You can't move through or push anything into walls.
- Floor (`_`): Open spaces where you can walk and move boxes.
- Targets (`O`): The spots where boxes need to go.
- Boxes (`X`): These are what you need to push onto the targets.
- Player (`P`): That's you! You'll move around the grid to push boxes.
- Box on Target (`√`): A box successfully placed on a target.
- Player on Target (`S`): You standing on a target.

# Your Goal
Your goal is to push all the boxes (`X`) onto the target spots (`O`). Once all boxes are on the targets, you win!

# Rules
You can only push boxes. You can't pull them, so plan ahead to avoid getting stuck.
You can't walk through or push boxes into walls (`#`).
To avoid traps, do not push boxes into corners or against walls where they can't be moved again.

# Current Step
Your current observation is:
{current_observation}
Your admissible actions are ["up", "down", "left", "right"].

Now it's your turn to make a move (choose ONE action only for the current step).
You should first reason step-by-step about the current situation — observe the positions of boxes and targets, plan a path to push a box toward a target, and avoid traps like corners or walls. This reasoning process MUST be enclosed within <think> </think> tags.\x20
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

TEMPLATE = """
You are an expert agent operating in the Sokoban environment.

# Symbols and Their Meaning
- Walls (`#`): These block movement. You can't move through or push anything into walls.
- Floor (`_`): Open spaces where you can walk and move boxes.
- Targets (`O`): The spots where boxes need to go.
- Boxes (`X`): These are what you need to push onto the targets.
- Player (`P`): That's you! You'll move around the grid to push boxes.
- Box on Target (`√`): A box successfully placed on a target.
- Player on Target (`S`): You standing on a target.

# Your Goal
Your goal is to push all the boxes (`X`) onto the target spots (`O`). Once all boxes are on the targets, you win!

# Rules
You can only push boxes. You can't pull them, so plan ahead to avoid getting stuck.
You can't walk through or push boxes into walls (`#`).
To avoid traps, do not push boxes into corners or against walls where they can't be moved again.

# Current Step
Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observaitons and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is:
{current_observation}
Your admissible actions are ["up", "down", "left", "right"].

Now it's your turn to make a move (choose ONE action only for the current step).
You should first reason step-by-step about the current situation — observe the positions of boxes and targets, plan a path to push a box toward a target, and avoid traps like corners or walls. This reasoning process MUST be enclosed within <think> </think> tags.\x20
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""


def first_prompt(grid: str) -> str:
    """The prompt of the first turn."""
    return TEMPLATE_NO_HISTORY.format(current_observation=grid)


def prompt(grid: str, history: Sequence[tuple[str, str]], history_length: int = HISTORY_LENGTH) -> str:
    """The prompt of a later turn: `history` holds (grid, move name) of every turn played."""
    if history_length <= 0:
        return first_prompt(grid)
    recent = list(history)[-history_length:]
    start = len(history) - len(recent)
    lines = [
        f"[Observation {start + j + 1}: '{obs}', Action {start + j + 1}: '{act}']"
        for j, (obs, act) in enumerate(recent)
    ]
    return TEMPLATE.format(
        step_count=len(history),
        history_length=len(recent),
        action_history="\n".join(lines),
        current_step=len(history) + 1,
        current_observation=grid,
    )


def board_prompt(grid: str) -> str:
    """A later turn's message in a chat that keeps its turns (`SokobanChatEnv`): the new board
    alone, in the words the first prompt used for it; the rules, the symbols and the reply
    format stay in the chat from the first turn, and the earlier boards with the moves made
    from them are the chat's own earlier turns."""
    return f"Your current observation is:\n{grid}"


_SHOWN = "current observation is:\n"
_AFTER = "\nYour admissible actions are"


def current_grid(text: str) -> tuple[str, ...] | None:
    """The rows (`game.SYMBOLS`) of the grid a prompt shows as the current observation, the
    inverse of filling either template (or `board_prompt`) with `game.render_grid`'s text;
    None if `text` shows none."""
    start = text.rfind(_SHOWN)
    if start == -1:
        return None
    start += len(_SHOWN)
    end = text.find(_AFTER, start)
    if end == -1:
        end = len(text.rstrip("\n"))  # `board_prompt`: the grid ends the message
    lines = text[start:end].split("\n")
    return tuple("".join(cell.strip() for cell in line.split("\t") if cell.strip()) for line in lines)
