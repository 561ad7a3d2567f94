"""Pick and build a backend from its config (a tagged union on `type`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .base import DEFAULT_IMAGE, SandboxBackend
from .bwrap import BwrapBackend, BwrapBackendConfig
from .docker import DockerBackend, DockerBackendConfig
from .errors import SandboxUnavailable
from .pool import PoolConfig, SandboxPool

log = logging.getLogger(__name__)


class AutoBackendConfig(BaseModel):
    """Docker when an engine answers and the base image exists; otherwise the bubblewrap backend."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["auto"] = "auto"
    docker: DockerBackendConfig = Field(default_factory=DockerBackendConfig)
    bwrap: BwrapBackendConfig = Field(default_factory=BwrapBackendConfig)


BackendConfig = Annotated[
    DockerBackendConfig | BwrapBackendConfig | AutoBackendConfig, Field(discriminator="type")
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(BackendConfig)

# One line per backend; a user backend registers its config type's tag and a constructor.
BACKENDS: dict[str, Callable[[Any], SandboxBackend]] = {
    "docker": DockerBackend,
    "bwrap": BwrapBackend,
}


def _auto(config: AutoBackendConfig) -> SandboxBackend:
    try:
        backend = DockerBackend(config.docker)
    except SandboxUnavailable as e:
        log.info("no Docker engine (%s); using the bubblewrap backend", e)
        return BwrapBackend(config.bwrap)
    from .images import image_exists

    if image_exists(backend.client, DEFAULT_IMAGE):
        return backend
    log.info("Docker engine found but no %s image (run `arborl sandbox build`); using bwrap", DEFAULT_IMAGE)
    return BwrapBackend(config.bwrap)


def make_backend(config: BackendConfig | Mapping[str, Any] | None = None) -> SandboxBackend:
    """Build the backend a config names; `None` means `{"type": "auto"}`."""
    cfg = _ADAPTER.validate_python(
        dict(config) if isinstance(config, Mapping) else config or {"type": "auto"}
    )
    if isinstance(cfg, AutoBackendConfig):
        return _auto(cfg)
    return BACKENDS[cfg.type](cfg)


def make_pool(config: Mapping[str, Any] | None, pool: PoolConfig) -> SandboxPool:
    """The pool a `sandbox` config names: a `SandboxPool` on this host's backend, or with
    `type: ray` a `RaySandboxPool` over a Ray cluster's sandbox nodes, where `pool` is each
    node's (it has `SandboxPool`'s API; docs/scale-out.md)."""
    cfg = dict(config or {"type": "auto"})
    if cfg.get("type") == "ray":
        from .ray_pool import RayPoolConfig, RaySandboxPool  # Ray is imported only when asked for

        ray_pool = RaySandboxPool(RayPoolConfig(**{**cfg, "pool": pool.model_dump()}))
        return cast(SandboxPool, ray_pool)
    return SandboxPool(make_backend(cfg), pool)
