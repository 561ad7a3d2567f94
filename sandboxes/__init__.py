"""arborl.sandboxes: where env state lives.

A `SandboxBackend` says where sandboxes run (`DockerBackend`: one container each;
`BwrapBackend`: bubblewrap namespaces where no engine exists); a `Sandbox` is what you do
with one (exec, files, snapshot/reset); a `SandboxPool` keeps them warm and bounded.
This layer imports nothing else of arborl.
"""

from .base import (
    DEFAULT_IMAGE,
    ExecResult,
    Limits,
    ResetResult,
    Sandbox,
    SandboxBackend,
    SandboxInfo,
    SandboxSpec,
)
from .bwrap import BwrapBackend, BwrapBackendConfig
from .docker import DockerBackend, DockerBackendConfig
from .errors import (
    Fault,
    ImageBuildError,
    PoolClosed,
    PoolTimeout,
    SandboxCrashed,
    SandboxError,
    SandboxFileNotFound,
    SandboxOpError,
    SandboxStartError,
    SandboxUnavailable,
    SandboxUnresponsive,
)
from .factory import BACKENDS, AutoBackendConfig, BackendConfig, make_backend, make_pool
from .pool import PoolConfig, SandboxPool

__all__ = [
    "BACKENDS",
    "DEFAULT_IMAGE",
    "AutoBackendConfig",
    "BackendConfig",
    "BwrapBackend",
    "BwrapBackendConfig",
    "DockerBackend",
    "DockerBackendConfig",
    "ExecResult",
    "Fault",
    "ImageBuildError",
    "Limits",
    "PoolClosed",
    "PoolConfig",
    "PoolTimeout",
    "ResetResult",
    "Sandbox",
    "SandboxBackend",
    "SandboxCrashed",
    "SandboxError",
    "SandboxFileNotFound",
    "SandboxInfo",
    "SandboxOpError",
    "SandboxPool",
    "SandboxSpec",
    "SandboxStartError",
    "SandboxUnavailable",
    "SandboxUnresponsive",
    "make_backend",
    "make_pool",
]
