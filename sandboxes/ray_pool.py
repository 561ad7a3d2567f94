"""The old home of `RaySandboxPool`, now `arborl.sandboxes.ray`: kept only because code outside
the sandbox layer still imports it from here (envs/event_loop.py, docs/scale-out.md)."""

from .ray.config import RayPoolConfig
from .ray.pool import NodeState, RaySandboxPool

__all__ = ["NodeState", "RayPoolConfig", "RaySandboxPool"]
