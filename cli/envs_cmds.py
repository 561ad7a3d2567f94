"""`arborl envs list`: the environments registered through arborl, built-in and user-made;
`arborl envs serve ID`: one of them over OpenEnv's protocol (envs/openenv_server.py)."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from typing import Any

from arborl.tasks.entry_points import load_entry_point


def _summary(entry_point: Any) -> str:
    """The first line of the env class's docstring (imports the class, not its heavy deps)."""
    try:
        if isinstance(entry_point, str):
            entry_point = load_entry_point(entry_point)
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


def cmd_envs_serve(args: argparse.Namespace) -> int:
    for module in args.imports:
        importlib.import_module(module)
    try:
        from arborl.envs.openenv_server import serve
    except ImportError as e:
        print(f"arborl envs serve: needs openenv-core: pip install -e '.[ecosystem]' ({e})", file=sys.stderr)
        return 2
    kwargs = json.loads(args.env_kwargs) if args.env_kwargs else {}
    print(f"serving {args.env_id} over OpenEnv on http://{args.host}:{args.port} (ws /ws)", flush=True)
    serve(args.env_id, host=args.host, port=args.port, suite=args.suite, env_kwargs=kwargs,
          max_sessions=args.max_sessions)  # fmt: skip
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
    s = inner.add_parser(
        "serve",
        help="serve a registered env over OpenEnv's HTTP/WebSocket protocol",
        description="Serve a registered env over OpenEnv's protocol (reset/step/state, /ws sessions), "
        "so OpenEnv clients and the trainers that use them can run it.",
    )
    s.add_argument("env_id", help="a registered id, e.g. arborl/Tool-v0")
    s.add_argument("--suite", help="the suite whose task ids reset(task=ID) takes, e.g. tool-mini")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--max-sessions", type=int, default=4, help="concurrent sessions (one env each)")
    s.add_argument(
        "--env-kwargs", help='JSON keyword arguments for gymnasium.make, e.g. \'{"backend": "local"}\''
    )
    s.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (one that registers your env); repeatable")  # fmt: skip
    s.set_defaults(fn=cmd_envs_serve)
