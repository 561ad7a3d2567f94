"""arborl.envs.web: `arborl/Web-v0`, a browser agent on self-hosted sites.

    env = gymnasium.make("arborl/Web-v0")               # Docker stack, else host processes
    obs, info = env.reset(options={"task": task})       # a WebTask
    obs, reward, terminated, truncated, info = env.step('fill(e7, "mouse")')

Layout: env.py (the Gymnasium env), actions.py (the action language), observation.py
(page → text / pixels), evaluate.py (task checks), stack.py (a worker's browser and sites) with
local_stack.py / docker_stack.py, stack_pool.py (warm stacks per sandbox pool), relay.py (unix-socket
plumbing), sites/ (the stdlib-only site servers).
"""

from .actions import Action, ActionError, parse_action
from .env import WebEnv
from .local_stack import LocalStack
from .sites import SITES, SiteDef, register_site
from .stack import BrowserCrashed, WebStack
from .stack_pool import StackConfig, StackPool, close_stack_pools, stack_pool

__all__ = [
    "SITES",
    "Action",
    "ActionError",
    "BrowserCrashed",
    "LocalStack",
    "SiteDef",
    "StackConfig",
    "StackPool",
    "WebEnv",
    "WebStack",
    "close_stack_pools",
    "parse_action",
    "register_site",
    "stack_pool",
]
