"""The state of an episode's BFCL backends, as `BfclEnv.state_hash` hashes it.

Each backend instance is its attributes, public and private: bfcl-eval's state checker
compares the public ones only, but later calls also read private ones (the file system's
working directory, which `cd` moves; the vehicle's brake pedal force, which `startEngine`
checks; the flight-cost cache `book_flight` reads), so two states that differ there are
two states. Left out: `_api_description` (a constant text) and each backend's seeded
`random.Random` (ids and readings are drawn from it; how far it has been drawn is not part
of what the agent sees, and its repr holds a memory address).

The file system's tree is the names and contents of its files and folders, the fields its
own `Directory.__eq__` / `File.__eq__` compare (not its repr, which follows creation
order); the working directory is its path. The rest (dicts with int and str keys, sets)
is encoded by `arborl.envs.state_hash.canonical`.
"""

from __future__ import annotations

import random
from typing import Any

from arborl.tasks.bfcl.backends import Backends

#: Attributes that are no part of a backend's state.
SKIPPED = frozenset({"_api_description"})


def backend_state(backends: Backends) -> dict[str, Any]:
    """Each involved class's state, by class name (module docstring)."""
    return {name: instance_state(inst) for name, inst in backends.instances.items()}


def instance_state(inst: Any) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for key, value in vars(inst).items():
        if key in SKIPPED or isinstance(value, random.Random):
            continue
        if _is_directory(value):
            value = _path(value) if key == "_current_dir" else _tree(value)
        state[key] = value
    return state


def _is_directory(value: Any) -> bool:
    return type(value).__name__ == "Directory" and hasattr(value, "contents")


def _tree(node: Any) -> dict[str, Any]:
    if _is_directory(node):
        return {"dir": node.name, "contents": {k: _tree(v) for k, v in node.contents.items()}}
    return {"file": node.name, "content": node.content}


def _path(node: Any) -> list[str]:
    names = []
    while node is not None:
        names.append(node.name)
        node = node.parent
    return names[::-1]
