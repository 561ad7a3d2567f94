"""`arborl envs list`: the environments and suites registered through arborl, each with its
source (built in, an installed env package, an `--import`ed module), and the installed env
packages, a broken one with its error; `arborl envs serve`: one of them over OpenEnv's protocol (envs/openenv_server.py)."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from arborl.tasks.common import load_entry_point

if TYPE_CHECKING:
    from arborl.envs.openenv_tasks import ServedTasks


def _summary(entry_point: Any) -> str:
    """The first line of the env class's docstring (imports the class, not its heavy deps)."""
    try:
        if isinstance(entry_point, str):
            entry_point = load_entry_point(entry_point)
        doc = inspect.getdoc(entry_point) or ""
    except Exception as e:  # an env whose module does not import is listed, with the reason
        return f"(cannot import: {type(e).__name__}: {e})"
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]


def cmd_envs_list(args: argparse.Namespace) -> int:
    import gymnasium

    import arborl.envs  # noqa: F401  (registers the built-in envs)
    from arborl.envs.registration import _name, registered_ids
    from arborl.tasks import list_suites
    from arborl.tasks.env_packages import GROUP, load_env_packages, registering_as, source_of

    for module in args.imports:  # user modules that call register_env when imported
        try:
            with registering_as(f"--import {module}"):
                importlib.import_module(module)
        except ImportError as e:
            print(f"arborl envs list: cannot import {module}: {e}", file=sys.stderr)
            return 2
    packages = load_env_packages()  # a broken one is listed below, never fatal
    suites = list_suites()
    env_rows = [(i, source_of("env", i), _name(gymnasium.registry[i].entry_point)) for i in registered_ids()]
    header, *table = _table(("ENV ID", "SOURCE", "ENTRY POINT"), env_rows)
    lines = [header]
    for (env_id, _, _), line in zip(env_rows, table, strict=True):
        summary = _summary(gymnasium.registry[env_id].entry_point) if args.describe else ""
        lines += [line, f"    {summary}"] if summary else [line]
    lines.append("")
    lines += _table(
        ("SUITE", "ENV ID", "SOURCE"), [(s.name, s.env_id, source_of("suite", s.name)) for s in suites]
    )
    lines.append("")
    if not packages:
        lines.append(f"env packages (entry point group {GROUP}): none installed")
    else:
        lines.append(f"env packages (entry point group {GROUP}):")
        for p in packages:
            what = (
                f"FAILED to load: {p.error}"
                if p.error
                else f"envs: {', '.join(p.env_ids) or 'none'}; suites: {', '.join(p.suites) or 'none'}"
            )
            lines.append(f"  {p.source}  {p.name} = {p.value}  {what}")
    print("\n".join(lines))
    return 0


def _served(args: argparse.Namespace) -> tuple[str, ServedTasks, dict[str, Any]]:
    """The env id, the served tasks and the env kwargs the command line names."""
    from arborl.envs.openenv_tasks import ServedTasks, resolve_suite

    for module in args.imports:
        importlib.import_module(module)
    suite = None
    if args.suite is not None:
        suite = resolve_suite(
            args.suite, repos_dirs=args.repos_dirs, environments=args.swe_environments, split=args.swe_split
        )
    env_id = args.env_id or (suite.env_id if suite is not None else None)
    if env_id is None:
        raise ValueError("name an env id or a --suite (whose env it then serves)")
    try:
        kwargs = json.loads(args.env_kwargs) if args.env_kwargs else {}
    except json.JSONDecodeError as e:
        raise ValueError(f"--env-kwargs is not JSON: {e}") from None
    if not isinstance(kwargs, dict):
        raise ValueError("--env-kwargs must be a JSON object")
    if suite is not None and env_id == suite.env_id:
        kwargs = {**suite.env_kwargs, **kwargs}  # as `arborl eval` makes the suite's env
    return env_id, ServedTasks(suite), kwargs


def cmd_envs_serve(args: argparse.Namespace) -> int:
    from arborl.envs.openenv_access import TOKEN_ENV, check_bind, load_token

    try:  # everything the operator can get wrong, before the slow import of OpenEnv
        check_bind(args.host, args.allow_remote)
        token, source = load_token(args.token_file)
        env_id, tasks, kwargs = _served(args)
    except (ValueError, LookupError, ImportError, OSError) as e:
        print(f"arborl envs serve: {e}", file=sys.stderr)
        return 2
    try:
        from arborl.envs.openenv_server import serve
    except ImportError as e:
        print(f"arborl envs serve: needs openenv-core: pip install -e '.[ecosystem]' ({e})", file=sys.stderr)
        return 2
    url = f"http://{args.host}:{args.port}"
    what = f"suite {tasks.suite.name} ({len(tasks)} tasks)" if tasks.suite else "the env's default task"
    print(f"serving {env_id}, {what}, over OpenEnv on {url} (ws /ws)", flush=True)
    shown = args.token_file is None and not os.environ.get(TOKEN_ENV)  # nowhere else to read it
    print(f"token: {source}" + (f": {token}" if shown else ""), flush=True)
    print(
        "clients send `Authorization: Bearer <token>`; OpenEnv's client takes it in the URL: "
        f"GenericEnvClient(base_url='http://arborl:<token>@{args.host}:{args.port}')",
        flush=True,
    )
    serve(env_id, token=token, host=args.host, port=args.port, tasks=tasks, env_kwargs=kwargs,
          max_sessions=args.max_sessions, allow_remote=args.allow_remote)  # fmt: skip
    return 0


def register(sub: Any) -> None:
    sp = sub.add_parser(
        "envs", help="list the registered environments", description="Environments registered through arborl."
    )
    inner = sp.add_subparsers(dest="envs_command", metavar="ACTION", required=True)
    p = inner.add_parser(
        "list",
        help="env ids and suites (built-in, installed packages', your own) with their sources",
        description="Env ids registered through arborl (each works with gymnasium.make) and the "
        "suites (arborl eval suite=NAME), each with its source: built in, an installed env package "
        "(its distribution and version; packages declare the entry point group arborl.envs) or an "
        "--import'ed module; then the installed env packages, a broken one with its error.",
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
        "so OpenEnv clients and the trainers that use them can run it. Clients pick tasks of --suite "
        "by id (they never send tasks) and must send the server's token.",
    )
    s.add_argument(
        "env_id", nargs="?", help="a registered id, e.g. arborl/Tool-v0 (default: the suite's env)"
    )
    s.add_argument(
        "--suite",
        help="the tasks clients may reset to, by id: a registered suite (tool-mini) or a path, "
        "as `arborl eval suite=` takes it (SWE-bench instances, OSWorld task JSON)",
    )
    s.add_argument("--repos-dir", dest="repos_dirs", action="append", default=[], metavar="DIR",
                   help="where a SWE-bench --suite file's repositories are (eval's swe.repos_dir); repeatable")  # fmt: skip
    s.add_argument(
        "--swe-environments", metavar="FILE", help="a JSON list of SWEEnvironment (eval's swe.environments)"
    )
    s.add_argument(
        "--swe-split",
        metavar="SPLIT",
        help="the split of a `datasets` DatasetDict --suite (eval's swe.split)",
    )
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    s.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host other machines can reach (0.0.0.0, a LAN address); the token still applies",
    )
    s.add_argument("--port", type=int, default=8000)
    s.add_argument(
        "--token-file",
        metavar="PATH",
        help="read the token from PATH (0600), or write a new one there when it is missing; "
        "else $ARBORL_SERVE_TOKEN, else a new token printed at start",
    )
    s.add_argument("--max-sessions", type=int, default=4, help="concurrent sessions (one env each)")
    s.add_argument(
        "--env-kwargs", help='JSON keyword arguments for gymnasium.make, e.g. \'{"backend": "bwrap"}\''
    )
    s.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (one that registers your env or suite); repeatable")  # fmt: skip
    s.set_defaults(fn=cmd_envs_serve)
