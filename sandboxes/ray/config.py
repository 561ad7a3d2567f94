"""`RayPoolConfig`: plain data, so the registry and the Hydra config read it without importing Ray."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..pool import PoolConfig


class RayPoolConfig(BaseModel):
    """Sandboxes on the nodes of a Ray cluster (`sandbox=ray`; docs/scale-out.md)."""

    model_config = ConfigDict(extra="forbid")
    #: Left out of the `sandbox` section of the Hydra config: the root `pool` section gives it.
    FROM_ROOT: ClassVar[frozenset[str]] = frozenset({"pool"})

    type: Literal["ray"] = "ray"
    address: str | None = Field(
        "auto",
        description="ray.init's address if this process has not joined Ray yet ('auto': this host's "
        "cluster; None: start a local one)",
    )
    node_resource: str = Field(
        "arborl_sandbox",
        description="custom resource marking the nodes that offer sandboxes (`ray start --resources`)",
    )
    backend: dict[str, Any] = Field(
        default_factory=lambda: {"type": "auto"},
        description="each node's own backend (a make_backend config: auto | docker | bwrap, as sandbox=...)",
    )
    pool: PoolConfig = Field(
        default_factory=PoolConfig, description="each node's pool; max_size is its capacity"
    )
    run_id: str | None = Field(
        None,
        description="label of this pool's sandboxes on every node; the reapers remove a run's leftovers "
        "by it (None: a fresh one per pool)",
    )
    prefer_own_node: bool = Field(
        True,
        description="place on the node this process runs on while it has room (a verl worker's own node)",
    )
    acquire_timeout_s: float = Field(300.0, gt=0, description="wait for free capacity before PoolTimeout")
    revive_interval_s: float = Field(
        2.0, gt=0, description="how often nodes without a live actor are retried"
    )
    start_timeout_s: float = Field(
        120.0, gt=0, description="longest a node's actor may take to start its pool"
    )
