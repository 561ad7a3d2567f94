"""`arborl envs list`: the environments registered through arborl, built-in and user-made."""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from typing import Any


def _summary(entry_point: Any) -> str:
    """The first line of the env class's docstring (imports the class, not its heavy deps)."""
    try:
        if isinstance(entry_point, str):
            module, _, name = entry_point.partition(":")
            entry_point = getattr(importlib.import_module(module), name)
        doc = inspect.getdoc(entry_point) or ""
    except Exception as e:  # an env whose module does not import is listed, with the reason
        return f"(cannot import: {type(e).__name__}: {e})"
    return doc.strip().splitlines()[0] if doc.strip() else ""


def cmd_envs_list(args: argparse.Namespace) -> int:
    import gymnasium

    import arborl.envs  # noqa: F401  (registers the built-in envs)
    from arborl.envs.registration import _name, registered_ids

    for module in args.imports:  # user modules that call register_env when imported
        try:
            importlib.import_module(module)
        except ImportError as e:
            print(f"arborl envs list: cannot import {module}: {e}", file=sys.stderr)
            return 2
    rows = [(i, _name(gymnasium.registry[i].entry_point)) for i in registered_ids()]
    width = max(len(i) for i, _ in rows)
    for env_id, entry in rows:
        summary = _summary(gymnasium.registry[env_id].entry_point) if args.describe else ""
        print(f"{env_id:<{width}}  {entry}" + (f"\n{'':<{width}}  {summary}" if summary else ""))
    return 0


def register(sub: Any) -> None:
    sp = sub.add_parser(
        "envs", help="list the registered environments", description="Environments registered through arborl."
    )
    inner = sp.add_subparsers(dest="envs_command", metavar="ACTION", required=True)
    p = inner.add_parser(
        "list",
        help="ids registered through arborl (built-in, then user-made) and their entry points",
        description="Ids registered through arborl (built-in, then user-made) and their entry points; "
        "each works with gymnasium.make.",
    )
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (a module of yours that calls register_env); repeatable",
    )
    p.add_argument("--describe", action="store_true", help="also print each env's one-line summary")
    p.set_defaults(fn=cmd_envs_list)
