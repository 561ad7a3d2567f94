"""`sandbox=auto`: Docker when an engine answers and the base image exists, else bubblewrap."""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import DEFAULT_IMAGE, SandboxBackend
from .bwrap import BwrapBackend, BwrapBackendConfig
from .docker import DockerBackend, DockerBackendConfig
from .errors import SandboxUnavailable

log = logging.getLogger(__name__)


class AutoBackendConfig(BaseModel):
    """Docker when an engine answers and the base image exists; otherwise the bubblewrap backend."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["auto"] = "auto"
    docker: DockerBackendConfig = Field(
        default_factory=DockerBackendConfig, description="if Docker is chosen"
    )
    bwrap: BwrapBackendConfig = Field(default_factory=BwrapBackendConfig, description="otherwise")


def auto_backend(config: AutoBackendConfig) -> SandboxBackend:
    """The backend `config` chooses on this host now."""
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
