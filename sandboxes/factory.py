"""The backend registry: every place that builds, lists or configures a backend reads it.

    BACKENDS["docker"] = BackendEntry("arborl.sandboxes.docker:DockerBackendConfig",
                                      "arborl.sandboxes.docker:DockerBackend")

A backend is a folder (`docker/`, `bwrap/`, `ray/`) plus one line here, or one
`register_backend(...)` call from outside the package. An entry names, as lazy
``"module:attr"`` entry points (Ray and the Docker SDK are imported only when asked for) or
as the objects themselves:

- `config`: its pydantic config model, with ``type: Literal["<name>"]`` and ``extra="forbid"``;
  the model's defaults are the ``sandbox=<name>`` option of the Hydra config (`config_trees`);
- `build`: what makes it from a validated config, by `kind`:
  ``host``    a `SandboxBackend` on this host (`arborl sandbox ls/gc` look at each),
  ``choice``  a `SandboxBackend` it picks among the host ones (``auto``),
  ``cluster`` a pool of its own over many hosts, built with the root `pool` section (``ray``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from pydantic import BaseModel

from .base import SandboxBackend
from .errors import UnknownBackend
from .pool import PoolConfig, SandboxPool

Kind = Literal["host", "choice", "cluster"]


@dataclass(frozen=True)
class BackendEntry:
    """One registered backend (module docstring)."""

    config: str | type[BaseModel]
    build: str | Callable[..., Any]
    kind: Kind = "host"

    def config_class(self) -> type[BaseModel]:
        cls = _load(self.config)
        assert isinstance(cls, type) and issubclass(cls, BaseModel), f"{self.config} is not a pydantic model"
        return cls

    def builder(self) -> Callable[..., Any]:
        return cast(Callable[..., Any], _load(self.build))


# One line per backend.
BACKENDS: dict[str, BackendEntry] = {
    "docker": BackendEntry(
        "arborl.sandboxes.docker:DockerBackendConfig", "arborl.sandboxes.docker:DockerBackend"
    ),
    "bwrap": BackendEntry("arborl.sandboxes.bwrap:BwrapBackendConfig", "arborl.sandboxes.bwrap:BwrapBackend"),
    "auto": BackendEntry(
        "arborl.sandboxes.auto:AutoBackendConfig", "arborl.sandboxes.auto:auto_backend", "choice"
    ),
    "ray": BackendEntry(
        "arborl.sandboxes.ray.config:RayPoolConfig", "arborl.sandboxes.ray.pool:make_ray_pool", "cluster"
    ),
}


def _load(target: Any) -> Any:
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def register_backend(
    name: str, config: str | type[BaseModel], build: str | Callable[..., Any], kind: Kind = "host"
) -> None:
    """Register a backend from outside this package (one line; module docstring). Registering
    a name again with another entry is an error."""
    entry = BackendEntry(config, build, kind)
    if name in BACKENDS and BACKENDS[name] != entry:
        raise ValueError(f"sandbox backend {name!r} is already registered as {BACKENDS[name]}")
    BACKENDS[name] = entry


def backend_names(kind: Kind | None = None) -> list[str]:
    """Registered backend names (of one `kind`), in registration order."""
    return [name for name, entry in BACKENDS.items() if kind is None or entry.kind == kind]


def entry(name: str) -> BackendEntry:
    try:
        return BACKENDS[name]
    except KeyError:
        raise UnknownBackend(
            f"unknown sandbox backend {name!r}; registered: {', '.join(backend_names())}"
        ) from None


def backend_config_class(name: str) -> type[BaseModel]:
    """The config model of backend `name`."""
    return entry(name).config_class()


def parse_backend_config(config: BaseModel | Mapping[str, Any] | None) -> BaseModel:
    """Validate a `sandbox` config (a mapping from Hydra, or a model) into its backend's model;
    `None` is ``{"type": "auto"}``."""
    if isinstance(config, BaseModel):
        return config
    data = dict(config or {"type": "auto"})
    return backend_config_class(str(data.get("type", "auto"))).model_validate(data)


def config_trees() -> dict[str, dict[str, Any]]:
    """Each backend's defaults as a plain tree: the options of the Hydra `sandbox` group
    (a model's ``FROM_ROOT`` fields are left out: other sections of the root config give them)."""
    trees = {}
    for name in BACKENDS:
        cls = backend_config_class(name)
        skip = set(getattr(cls, "FROM_ROOT", ()))
        trees[name] = {"type": name, **defaults_tree(cls, skip)}
    return trees


def defaults_tree(cls: type[BaseModel], skip: set[str] | None = None) -> dict[str, Any]:
    """`cls`'s field defaults as JSON-like data; a field without one is Hydra's ``???`` (must be given)."""
    fields = {n: f for n, f in cls.model_fields.items() if n not in (skip or set())}
    given = {n: f.get_default(call_default_factory=True) for n, f in fields.items() if not f.is_required()}
    tree = cls.model_construct(**given).model_dump(mode="json", include=set(given), by_alias=True)
    return {(f.alias or n): tree.get(f.alias or n, "???") for n, f in fields.items()}


def make_backend(config: BaseModel | Mapping[str, Any] | None = None) -> SandboxBackend:
    """Build the backend a config names (``type``); `None` means ``{"type": "auto"}``."""
    cfg = parse_backend_config(config)
    name = str(getattr(cfg, "type", "auto"))
    found = entry(name)
    if found.kind == "cluster":
        raise UnknownBackend(f"sandbox={name} is a pool over many hosts, not one backend: use make_pool")
    backend: SandboxBackend = found.builder()(cfg)
    return backend


def make_pool(config: BaseModel | Mapping[str, Any] | None, pool: PoolConfig) -> SandboxPool:
    """The pool a `sandbox` config names: a `SandboxPool` on this host's backend, or what a
    ``cluster`` backend builds over many hosts with `pool` as each host's (``ray``: a
    `RaySandboxPool`, which has `SandboxPool`'s API; docs/scale-out.md)."""
    cfg = parse_backend_config(config)
    found = entry(str(getattr(cfg, "type", "auto")))
    if found.kind == "cluster":
        data = cfg.model_dump(exclude=set(getattr(type(cfg), "FROM_ROOT", ())))
        return cast(SandboxPool, found.builder()(data, pool))
    return SandboxPool(make_backend(cfg), pool)
