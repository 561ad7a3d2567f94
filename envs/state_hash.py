"""State hashes: a short digest of an env state, total over what states hold, and the same
in every process.

`stable_hash(obj)` is the SHA-256 of `canonical(obj)` as sorted-key JSON, cut to 16 hex
digits. `canonical` gives equal values one JSON text whatever Python holds them in:

    plain JSON (str-keyed dicts, lists, str, int, float, bool, None)   as it is
    tuple                                                               a list
    dict with a key that is not a str ({12446: ..., "order_type": ...}) {"<dict>": [[key, value], ...]}
    set, frozenset                                                      {"<set>": [item, ...]}
    dataclass instance                                                  {"<Name>": {field: value, ...}}
    any other object                                                    {"<Name>": repr(obj)}

Pairs and items are sorted by their JSON text, so keys of mixed types are never compared
with each other (BFCL's trading backend keeps orders under both int and str keys) and a
set's hash does not depend on its iteration order (which for str depends on the process's
hash seed). Plain JSON data encodes exactly as `json.dumps(obj, sort_keys=True)` always did,
so the hashes of states that hashed before are unchanged.

A repr is only used when it is the same in every process: one holding a memory address
(`<random.Random object at 0x...>`, object's default) raises `StateHashError`, as does a
cycle. Python's `hash()` is never used.

The env base calls `state_hash()` after every reset and step. A failure there is an
error in tests (`ARBORL_STRICT_STATE_HASH=1`, which tests/conftest.py sets, or an env made
with `strict=True`) and in runs a counted warning: the first failure of each env class is
logged with its exception, every failure is counted in `STATE_HASH_FAILURES` (what a run
reports: `state_hash_failures()`), and the step's info gets `state_hash: ""` (an unknown
state, which GiGPO matches with nothing) and `state_hash_error`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

#: The environment variable that makes a state hash failure raise (tests set it).
STRICT_ENV_VAR = "ARBORL_STRICT_STATE_HASH"
#: State hash failures since the process started, by env class name.
STATE_HASH_FAILURES: Counter[str] = Counter()

_ADDRESS = re.compile(r"\bat 0x[0-9a-fA-F]+")


class StateHashError(TypeError):
    """A value in an env state has no encoding that is the same in every process. Give its
    class a `__repr__` of its fields (or make it a dataclass), or leave it out of the state
    the env hashes."""


def stable_hash(obj: Any) -> str:
    """A short, stable hash of `obj` (16 hex digits), total over `canonical`'s values: dict
    key order and set order do not matter; a tuple hashes as the list it holds."""
    data = json.dumps(canonical(obj), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def canonical(value: Any) -> Any:
    """`value` as JSON data whose text is one for equal values (module docstring)."""
    return _canonical(value, set())


def _canonical(value: Any, path: set[int]) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    key = id(value)
    if key in path:
        raise StateHashError(f"the state holds a cycle through a {type(value).__name__}")
    path.add(key)
    try:
        return _container(value, path)
    finally:
        path.discard(key)


def _container(value: Any, path: set[int]) -> Any:
    if isinstance(value, Mapping):
        if all(isinstance(k, str) for k in value):
            return {k: _canonical(v, path) for k, v in value.items()}
        pairs = [[_canonical(k, path), _canonical(v, path)] for k, v in value.items()]
        return {"<dict>": sorted(pairs, key=_text)}
    if isinstance(value, (set, frozenset)):
        return {"<set>": sorted((_canonical(v, path) for v in value), key=_text)}
    if isinstance(value, (list, tuple)):
        return [_canonical(v, path) for v in value]
    name = f"<{type(value).__qualname__}>"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {name: _canonical(fields, path)}
    text = repr(value)
    if _ADDRESS.search(text):
        raise StateHashError(
            f"a {type(value).__module__}.{type(value).__qualname__} in the state has a repr with a "
            f"memory address ({text[:80]!r}), which differs between processes; give the class a "
            "__repr__ of its fields, or leave it out of the state the env hashes"
        )
    return {name: text}


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def strict() -> bool:
    """Whether a state hash failure raises (`ARBORL_STRICT_STATE_HASH` set, not "0")."""
    return os.environ.get(STRICT_ENV_VAR, "") not in ("", "0")


def record_failure(env_name: str, error: BaseException) -> None:
    """Count a failed state hash of `env_name`; log the first of each env class in full."""
    STATE_HASH_FAILURES[env_name] += 1
    if STATE_HASH_FAILURES[env_name] == 1:
        log.warning(
            '%s: state hash failed (%s: %s); such states are unknown (state_hash ""). Later '
            "failures of %s are counted, not logged: arborl.envs.state_hash.state_hash_failures()",
            env_name,
            type(error).__name__,
            error,
            env_name,
            exc_info=error,
        )


def state_hash_failures() -> dict[str, int]:
    """State hash failures since the process started, by env class name (a copy)."""
    return dict(STATE_HASH_FAILURES)
