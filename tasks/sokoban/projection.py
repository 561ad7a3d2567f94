"""From the model's reply to a move, and the turn's reward, as verl-agent does it.

verl-agent's `sokoban_projection` (agent_system/environments/env_package/sokoban/projection.py,
lines 21-70; read at zhangyun04/verl-agent @ 24dda38, a fork of langfengQ/verl-agent, whose
own snapshot the reference store lacks; every verl-agent path below is at that commit):

- the reply is lower-cased; the text between the first ``<action>`` and the first
  ``</action>`` is searched for ``up``, ``down``, ``left``, ``right``, ``still`` in that order,
  and the first found is the move (``still``: no move, but a valid reply);
- no tags, or none of those words between them: no move (verl-agent's action 0), invalid;
- a reply without both ``<think>`` and ``</think>`` is invalid too, but the move it names is
  still played.

Scoring of a turn (`turn_reward`):

- a move is one gym-sokoban step: `game.move_reward` (-0.1 a step, +1 / -1 a box on / off a
  target, +10 when solved);
- no move (action 0: an invalid reply, or ``still``) does not reach gym-sokoban, so it counts
  no gym-sokoban step; verl-agent's SokobanEnv.step returns -0.1 for it
  (agent_system/environments/env_package/sokoban/sokoban/env.py, lines 94-95);
- an invalid reply costs `INVALID_ACTION_PENALTY` more: verl-agent's trainer subtracts
  `invalid_action_penalty_coef * (1 - is_action_valid)` from the turn's reward
  (`apply_invalid_action_penalty`, verl/trainer/ppo/ray_trainer.py, lines 200-224), and its
  Sokoban recipe sets the coefficient to 0.1 (examples/gigpo_trainer/run_sokoban.sh, lines
  49-50: `actor.use_invalid_action_penalty=True`, `actor.invalid_action_penalty_coef=0.1`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .game import Board, move_reward, push

INVALID_ACTION_PENALTY = 0.1
#: verl-agent's reward of a turn that moves nothing (its action 0).
NO_MOVE_REWARD = -0.1
#: The words verl-agent looks for, in its order (`still` is its action 0).
WORDS = {"up": "Up", "down": "Down", "left": "Left", "right": "Right", "still": None}


@dataclass(frozen=True)
class Projection:
    """What a reply asks for: `move` (None: none) and whether verl-agent counts it valid."""

    move: str | None
    valid: bool

    @property
    def action_name(self) -> str:
        """The name verl-agent's history shows for it (its ACTION_LOOKUP; 0 is "Still")."""
        return self.move or "Still"


def project(reply: str, require_think: bool = True) -> Projection:
    """The move and validity of `reply` (module doc)."""
    text = reply.lower()
    start, end = text.find("<action>"), text.find("</action>")
    if start == -1 or end == -1:
        return Projection(None, False)
    inside = text[start + len("<action>") : end]
    word = next((w for w in WORDS if w in inside), None)
    if word is None:
        return Projection(None, False)
    thought = "<think>" in reply and "</think>" in reply
    return Projection(WORDS[word], thought or not require_think)


def turn_reward(
    board: Board, projection: Projection, invalid_penalty: float = INVALID_ACTION_PENALTY
) -> tuple[Board, float]:
    """The board after the turn and the turn's reward (module doc)."""
    after = board if projection.move is None else push(board, projection.move)
    reward = NO_MOVE_REWARD if projection.move is None else move_reward(board, after)
    if not projection.valid:
        reward -= invalid_penalty
    return after, reward
