"""arborl.envs: text-in, chat-out Gymnasium envs with an async twin and sandbox leases.

    import gymnasium, arborl.envs
    env = gymnasium.make("arborl/Code-v0")                  # or "arborl/Tool-v0"
    obs, info = env.reset(options={"task": task})           # info["tools"]: for the chat template
    obs, reward, terminated, truncated, info = env.step(model_reply)

Importing this package registers the built-in ids with Gymnasium.
"""

from .adapters import FourTupleAdapter
from .aio import aclose, afinish, arelease, areset, astep
from .base import Step, TaskError, TextEnv, stable_hash
from .episodes import Episode, on_envs, run_episode, run_episodes, run_episodes_sync
from .parsers import PARSERS, ParseResult, ToolCall, ToolCallParser, get_parser, register_parser
from .registration import ARBORL_ENV_IDS, register_builtin_envs, register_env, registered_ids
from .runtime import configure, default_pool, get_runtime
from .sandboxed import SandboxEnv, TimedSandbox
from .spaces import UnicodeText, chat_observation_space, observation_messages
from .tool_calling import ToolCallingEnv
from .tools import Tool, ToolBox, ToolResult, function_tool
from .wrappers import AsyncWrapper, FormatPenalty, StepTimeout, TokenBudget, TruncateObservation, TurnLimit

register_builtin_envs()

__all__ = [
    "ARBORL_ENV_IDS",
    "PARSERS",
    "AsyncWrapper",
    "Episode",
    "FormatPenalty",
    "FourTupleAdapter",
    "ParseResult",
    "SandboxEnv",
    "Step",
    "StepTimeout",
    "TaskError",
    "TextEnv",
    "TimedSandbox",
    "TokenBudget",
    "Tool",
    "ToolBox",
    "ToolCall",
    "ToolCallParser",
    "ToolCallingEnv",
    "ToolResult",
    "TruncateObservation",
    "TurnLimit",
    "UnicodeText",
    "aclose",
    "afinish",
    "arelease",
    "areset",
    "astep",
    "chat_observation_space",
    "configure",
    "default_pool",
    "function_tool",
    "get_parser",
    "get_runtime",
    "observation_messages",
    "on_envs",
    "register_env",
    "register_parser",
    "registered_ids",
    "run_episode",
    "run_episodes",
    "run_episodes_sync",
    "stable_hash",
]
