"""Sandboxes on the nodes of a Ray cluster, behind `SandboxPool`'s API (`sandbox=ray`).

- `config.py`: `RayPoolConfig` (plain data: read without importing Ray);
- `pool.py`: `RaySandboxPool`, placing each sandbox on a node and following it there;
- `node.py`: `SandboxNode`, the actor on each node that owns that node's `SandboxPool`;
- `sandbox.py`: `RemoteSandbox`, a sandbox of another node as an env uses one;
- `watchdog.py`: reaps a node's sandboxes when the process owning them dies.

Importing this package does not import Ray; `RaySandboxPool` (and its modules) does.
"""

from __future__ import annotations

from typing import Any

from .config import RayPoolConfig

__all__ = ["RayPoolConfig", "RaySandboxPool"]


def __getattr__(name: str) -> Any:
    if name == "RaySandboxPool":
        from .pool import RaySandboxPool

        return RaySandboxPool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
