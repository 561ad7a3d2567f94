"""Environments shipped as Python packages: discovered through the `arborl.envs` entry-point
group, loaded once per process, the first time arborl resolves an env id or a suite name.

A package declares one entry point per registration function (or module):

    [project.entry-points."arborl.envs"]
    guess = "arborl_example_env:register"      # register() calls register_env / register_suite

Once it is installed, `gymnasium.make("example/Guess-v0")` (after `import arborl.envs`),
`arborl eval suite=guess-mini`, `arborl train` and `arborl envs list` find it: each calls
`load_env_packages()` before it looks an id or a suite up. A package whose import or
registration raises is kept in `env_packages()` with its error and logged once as a warning;
the other packages, and arborl, go on.

Why not Gymnasium's own `gymnasium.envs` group: Gymnasium 1.x no longer reads it (its plugin
loader went with gym 0.26), so a package declared there would be found by nothing; and an
arborl package registers suites and grading hooks too, which that group knows nothing of,
while loading it would import every old gym plugin on the machine with ours.

This module also keeps where each env id and suite came from (`source_of`): built in, a
package (its distribution name and version), an `--import`ed module, or code that ran
(`RUN_TIME`). The registries record it (`note_registered`) under `registering_as(source)`.
"""

from __future__ import annotations

import importlib.metadata
import logging
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

#: The entry-point group an env package declares its registration functions in.
GROUP = "arborl.envs"
BUILT_IN = "built in"
#: What registered an id outside any `registering_as`: a user's code, a notebook cell.
RUN_TIME = "registered at run time"

Kind = Literal["env", "suite"]
log = logging.getLogger(__name__)


@dataclass
class EnvPackage:
    """One `arborl.envs` entry point of an installed distribution, and what loading it gave."""

    name: str
    """The entry point's name (`guess` above)."""
    value: str
    """What it names, ``"module:function"`` or ``"module"``."""
    distribution: str
    version: str
    env_ids: list[str] = field(default_factory=list)
    suites: list[str] = field(default_factory=list)
    error: str | None = None
    """Why the package failed to import or register (None: it loaded)."""

    @property
    def source(self) -> str:
        """How `arborl envs list` names it: the distribution and its version."""
        return f"{self.distribution} {self.version}"


_lock = threading.RLock()  # one loading of the packages per process, whichever thread asks first
_loaded = False
_packages: list[EnvPackage] = []
_sources: dict[tuple[Kind, str], str] = {}
# The source whose registrations run now, per thread (innermost last): a per-thread stack needs
# no lock, so a registration in one thread never waits on (or is blamed on) another's import.
_current = threading.local()


def _stack() -> list[str]:
    if not hasattr(_current, "stack"):
        _current.stack = []
    return _current.stack


@contextmanager
def registering_as(source: str) -> Iterator[None]:
    """Attribute what is registered inside the block to `source` (nested blocks: innermost)."""
    stack = _stack()
    stack.append(source)
    try:
        yield
    finally:
        stack.pop()


def note_registered(kind: Kind, name: str, *, replaced: bool = False) -> None:
    """Called by the env and suite registries: remember who registered `name` (the first
    registration stays its source, unless it is `replaced` by a forced one)."""
    if replaced or (kind, name) not in _sources:
        stack = _stack()
        _sources[(kind, name)] = stack[-1] if stack else RUN_TIME


def source_of(kind: Kind, name: str) -> str:
    """`BUILT_IN`, a package's `source`, ``--import MODULE``, or `RUN_TIME`."""
    return _sources.get((kind, name), RUN_TIME)


def load_env_packages() -> list[EnvPackage]:
    """Load every installed `arborl.envs` entry point (once per process) and return them all,
    the broken ones with their error."""
    global _loaded
    with _lock:
        if _loaded:  # also when a package's registration asks again (it looks a suite up)
            return list(_packages)
        _loaded = True
        for entry in sorted(importlib.metadata.entry_points(group=GROUP), key=_key):
            _packages.append(_load(entry))
        return list(_packages)


def env_packages() -> list[EnvPackage]:
    """The packages found so far (`load_env_packages` first to be sure all are)."""
    return list(_packages)


def _key(entry: importlib.metadata.EntryPoint) -> tuple[str, str]:
    return (entry.dist.name if entry.dist else "", entry.name)


def _load(entry: importlib.metadata.EntryPoint) -> EnvPackage:
    dist = entry.dist
    package = EnvPackage(
        entry.name,
        entry.value,
        dist.name if dist else "(unknown distribution)",
        dist.version if dist else "?",
    )
    before = set(_sources.items())
    try:
        with registering_as(package.source):
            target = entry.load()
            if callable(target):
                target()
            elif not isinstance(target, types.ModuleType):  # a module registers as it is imported
                raise TypeError(f"{entry.value} is a {type(target).__name__}, not a function or a module")
    except (Exception, SystemExit) as e:  # a broken package is reported, never fatal to arborl
        package.error = f"{type(e).__name__}: {e}"
        log.warning(
            "env package %s (entry point %s = %s) failed to load, its envs are skipped: %s",
            package.source,
            entry.name,
            entry.value,
            package.error,
        )
        log.debug("traceback of %s", package.source, exc_info=True)
    added = [
        key for key, source in _sources.items() if source == package.source and (key, source) not in before
    ]
    package.env_ids = [name for kind, name in added if kind == "env"]
    package.suites = [name for kind, name in added if kind == "suite"]
    return package


__all__ = [
    "BUILT_IN",
    "GROUP",
    "RUN_TIME",
    "EnvPackage",
    "env_packages",
    "load_env_packages",
    "note_registered",
    "registering_as",
    "source_of",
]
