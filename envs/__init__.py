"""arborl.envs: text-in, chat-out Gymnasium envs with an async twin and sandbox leases.

    import gymnasium, arborl.envs
    env = gymnasium.make("arborl/Code-v0")                  # or "arborl/Tool-v0"
    obs, info = env.reset(options={"task": task})           # info["tools"]: for the chat template
    obs, reward, terminated, truncated, info = env.step(model_reply)

Importing this package registers the built-in ids with Gymnasium, and makes `gymnasium.make`
of an id not registered yet load the installed env packages first (`arborl.envs` entry
points: `arborl.tasks.env_packages`). It exports the contract
(the env base classes, `Step`, `register_env`, the wrappers) and one async route that works on
any Gymnasium env (`areset`/`astep`/`aclose`); everything else is imported from its module:
tools from `arborl.envs.toolbox`, parsers from `.parsers`, episode loops from `.episodes`, the
background loop and default pools from `.event_loop`, observation helpers from `.spaces`.
"""

from .aio import aclose, afinish, arelease, areset, astep
from .base import Step, TaskError, TextEnv
from .registration import (
    find_installed_packages_on_lookup,
    register_builtin_envs,
    register_env,
    registered_ids,
)
from .sandboxed import SandboxEnv
from .tool_calling_env import ToolCallingEnv
from .wrappers import AsyncWrapper, FormatPenalty, StepTimeout, TokenBudget, TruncateObservation, TurnLimit

register_builtin_envs()
find_installed_packages_on_lookup()

__all__ = [
    "AsyncWrapper",
    "FormatPenalty",
    "SandboxEnv",
    "Step",
    "StepTimeout",
    "TaskError",
    "TextEnv",
    "TokenBudget",
    "ToolCallingEnv",
    "TruncateObservation",
    "TurnLimit",
    "aclose",
    "afinish",
    "arelease",
    "areset",
    "astep",
    "register_env",
    "registered_ids",
]
