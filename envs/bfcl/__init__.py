"""arborl.envs.bfcl: `arborl/BFCL-v0`, BFCL v4 function calling scored by bfcl-eval (env.py;
tools.py: BFCL's function docs as tool schemas)."""

from .env import DEFAULT_TASK, BfclEnv

__all__ = ["DEFAULT_TASK", "BfclEnv"]
