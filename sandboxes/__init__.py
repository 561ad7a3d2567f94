"""arborl.sandboxes: where env state lives.

A `SandboxBackend` says where sandboxes run (`DockerBackend`: one container each;
`BwrapBackend`: bubblewrap namespaces where no engine exists; each in its folder); a
`Sandbox` is what you do with one (exec, files, snapshot/reset); a `SandboxPool` keeps them
warm and bounded. `factory` is the backend registry (`make_backend`, `make_pool`,
`register_backend`); `ray/` is a pool over the sandbox nodes of a Ray cluster.
This layer imports nothing else of arborl.
"""

from .auto import AutoBackendConfig
from .base import (
    DEFAULT_IMAGE,
    ROOT_ENV,
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
    UnknownBackend,
)
from .factory import BACKENDS, BackendEntry, backend_names, make_backend, make_pool, register_backend
from .pool import PoolConfig, SandboxPool

__all__ = [
    "BACKENDS",
    "DEFAULT_IMAGE",
    "ROOT_ENV",
    "AutoBackendConfig",
    "BackendEntry",
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
    "UnknownBackend",
    "backend_names",
    "make_backend",
    "make_pool",
    "register_backend",
]
