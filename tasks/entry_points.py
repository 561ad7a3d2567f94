"""``"package.module:attribute"`` references, resolved in one place.

Suites name their loaders and policies this way, tasks their tool handlers and verifiers,
the env registry its classes, the engine registry its backends: the module is imported
only when the reference is used, so listing what exists imports nothing heavy.
"""

from __future__ import annotations

import importlib
from typing import Any


class EntryPointError(LookupError):
    """A reference is malformed or names nothing importable (the message says which)."""


def load_entry_point(ref: str) -> Any:
    """The object that ``"package.module:attribute"`` names (the module is imported)."""
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise EntryPointError(f"entry point {ref!r} is not of the form 'package.module:attribute'")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise EntryPointError(f"cannot load {ref}: {type(e).__name__}: {e}") from e
