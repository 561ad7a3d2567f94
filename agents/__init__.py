"""arborl.agents: the agent wrapper that turns env interaction into training data.

- `Agent` (agent.py): an inference engine driving a Gymnasium env, recorded token-in /
  token-out as `Trajectory`s of `Turn`s (trajectory.py) through an append-only chat
  (chat.py); `engines/`: transformers, vLLM, OpenAI-compatible backends.
"""

from .agent import Agent, AgentConfig, AgentEpisode, EpisodeState, ForkMismatch
from .chat import ChatTemplateError, TokenizedChat, check_append_only
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
