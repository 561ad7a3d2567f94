"""BFCL's multi-turn backends (file system, trading, travel, ...), one fresh set per run.

The agent's text reaches a backend only as a parsed call: a name and a dict of JSON values.
The name is looked up in a table of the involved classes' public bound methods (the same
table bfcl-eval builds: `inspect.getmembers(instance, inspect.ismethod)`, names starting with
`_` skipped, a later class winning a clash), and the method is called with the arguments
as keywords. Nothing is `eval`-ed. A name outside the table (a dunder, a private method,
a data attribute, a builtin, a dotted path) is refused with the message bfcl-eval's executor
gives an unknown name, so scores stay the same.

Why not bfcl-eval's `execute_multi_turn_func_call`: it renders each call as Python source
and `eval`s it in its own module (where `open(...)`, `importlib.import_module(...)` and any
builtin resolve), and it keeps the instances in module globals keyed by model name and
entry id, so two runs of one entry share state. Results are turned into text as it does.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from .official import bfcl

#: Names bfcl-eval's executor refuses outright (its own list).
BLOCKED = ("kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run")


class BackendError(RuntimeError):
    """A BFCL backend class could not be loaded or set up: an infrastructure error, not the
    agent's. Check that bfcl-eval is installed (scripts/setup.sh)."""


class Backends:
    """Fresh instances of an entry's involved classes, and their public methods by name."""

    def __init__(self, entry: Mapping[str, Any], *, long_context: bool) -> None:
        lib = bfcl()
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, Callable[..., Any]] = {}
        initial = entry.get("initial_config") or {}
        for class_name in entry["involved_classes"]:
            try:
                module = importlib.import_module(lib.CLASS_FILE_PATH_MAPPING[class_name])
                instance = getattr(module, class_name)()
                if class_name not in lib.STATELESS_CLASSES:
                    instance._load_scenario(
                        copy.deepcopy(initial.get(class_name, {})), long_context=long_context
                    )
            except Exception as e:
                raise BackendError(
                    f"BFCL backend {class_name} failed to load: {type(e).__name__}: {e}"
                ) from e
            self.instances[class_name] = instance
            for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not name.startswith("_"):
                    self.methods[name] = method

    def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one call; the result (or the error) as text, as bfcl-eval renders it."""
        if name.split(".")[-1] in BLOCKED:
            return f"Error during execution: Function call {name.split('.')[-1]} is not allowed."
        method = self.methods.get(name)
        if method is None:
            return f"Error during execution: name '{name}' is not defined"
        try:
            result = method(**copy.deepcopy(dict(arguments)))
        except Exception as e:
            return f"Error during execution: {e}"
        return _as_text(result)

    def run(self, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
        return [self.call(name, args) for name, args in calls]


def _as_text(result: Any) -> str:
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


def parse_ground_truth_call(source: str, backends: Backends) -> tuple[str, dict[str, Any]]:
    """A ground-truth call (`"sort('a.pdf')"`, trusted data from possible_answer/) as a name
    and keyword arguments; positional arguments are named from the method's signature."""
    node = ast.parse(source, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain call in BFCL's ground truth: {source!r}")
    name = node.func.id
    args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
    if node.args:
        params = list(inspect.signature(backends.methods[name]).parameters)
        args.update({params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)})
    return name, args
