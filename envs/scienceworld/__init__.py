"""`arborl/ScienceWorld-v0` (env.py), the package's step without its extras (game.py), and
the pool of JVMs the episodes share (jvm.py). Tasks and grading: `arborl.tasks.scienceworld`."""

from .env import ScienceWorldEnv
from .jvm import JVMDied, JVMPool, default_pool

__all__ = ["JVMDied", "JVMPool", "ScienceWorldEnv", "default_pool"]
