"""arborl.agents: the agent wrapper that turns env interaction into training data.

- `Agent` (agent.py): an inference engine driving a Gymnasium env, recorded token-in /
  token-out as `Trajectory`s of `Turn`s (trajectory.py) through an append-only chat
  (chat.py); `episode.py`: an episode in progress and finished; `overflow.py`: going on past
  the context budget; `seeding.py`: each generation's seed; `engines/`: transformers, vLLM,
  OpenAI-compatible backends.
- `tree.py`: tree rollouts (forks at turns and uncertain tokens).
- `credit/`: step-level credit, one module per estimator, registered into verl's registry;
  the trainer (either of them) runs them on the trajectories the agent recorded.
- `tiny.py`: the tiny policy model built locally (a tokenizer trained here, its chat
  template, a Qwen2 config): what the agent runs when no model path is given.
"""

from .agent import Agent, AgentConfig
from .chat import ChatTemplateError, TokenizedChat, check_append_only
from .episode import AgentEpisode, EpisodeState, ForkMismatch
from .trajectory import Trajectory, TrajectoryTree, TreeNode, Turn, read_trajectories, write_trajectories

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentEpisode",
    "ChatTemplateError",
    "EpisodeState",
    "ForkMismatch",
    "TokenizedChat",
    "Trajectory",
    "TrajectoryTree",
    "TreeNode",
    "Turn",
    "check_append_only",
    "read_trajectories",
    "write_trajectories",
]
