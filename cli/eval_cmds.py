"""`arborl eval` (run a suite with an agent, resumable) and `arborl eval-report RUN...`."""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from omegaconf import OmegaConf
from rich.console import Console
from rich.table import Table

from .config import load_config, section

console = Console(soft_wrap=True)  # long lines stay whole in logs and pipes
#: Sections of the root config that are not the eval's own (where sandboxes run, the demo).
_SHARED = ("sandbox", "pool", "image", "demo")


def _list_suites() -> int:
    from arborl.tasks import list_suites

    table = Table(
        "suite", "env", "tasks", "gold / empty", "max turns", "description", title="registered suites"
    )
    for suite in list_suites():
        try:
            count = str(len(suite.tasks()))
        except Exception as e:  # a suite that cannot load says why, the others are still listed
            count = f"[red]cannot load: {type(e).__name__}[/red]"
        table.add_row(
            suite.name,
            suite.env_id,
            count,
            f"{'yes' if suite.gold else 'no'} / {'yes' if suite.empty else 'no'}",
            str(suite.max_turns),
            suite.description if len(suite.description) <= 70 else suite.description[:67] + "...",
        )
    console.print(table)
    return 0


def import_user_modules(names: list[str]) -> None:
    """Import each `--import` module (a dotted name, or a .py file path) for what it registers:
    suites (`register_suite`), SWE environments (`register_environment`)."""
    import importlib
    import importlib.util
    import sys
    from pathlib import Path

    for name in names:
        path = Path(name)
        if name.endswith(".py"):
            if not path.is_file():
                raise FileNotFoundError(f"--import {name}: no such file")
            module_name = f"arborl_user_{path.stem}"
            spec = importlib.util.spec_from_file_location(module_name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
        else:
            importlib.import_module(name)


def cmd_eval(args: argparse.Namespace) -> int:
    try:
        import_user_modules(args.imports or [])
    except Exception as e:  # the user's module: say which one and why, do not trace back
        console.print(f"[red]--import failed: {type(e).__name__}: {e}[/red]")
        return 2
    if args.list:
        return _list_suites()
    from pydantic import ValidationError

    from arborl.eval.config import EvalConfig
    from arborl.eval.runner import run_eval
    from arborl.eval.store import RunMismatch
    from arborl.sandboxes import PoolConfig
    from arborl.tasks import SuiteError

    cfg = load_config(args.overrides, name="eval")
    values = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(values, dict)
    try:
        ecfg = EvalConfig.model_validate({k: v for k, v in values.items() if k not in _SHARED})
    except ValidationError as e:
        console.print(f"[red]invalid eval config:[/red] {e}")
        return 2
    if not args.verbose:
        logging.getLogger("arborl").setLevel(logging.WARNING)
    try:
        outcome = asyncio.run(
            run_eval(
                ecfg,
                sandbox=section(cfg, "sandbox"),
                pool=PoolConfig(**section(cfg, "pool")),
                console=console,
            )
        )
    except (SuiteError, RunMismatch, ValueError, FileNotFoundError) as e:
        console.print(f"[red]{type(e).__name__}: {e}[/red]")
        return 2
    s = outcome.summary
    pk = ", ".join(f"pass@{k} {v:.1%}" for k, v in s["pass_at_k"].items() if v is not None)
    console.print(
        f"[bold]{ecfg.suite} · {ecfg.agent}[/bold]: resolved {s['resolved']}/{s['samples']} "
        f"([bold]{s['resolved_rate']:.1%}[/bold]); {pk}; turns {s['turns_mean']:.2f}; "
        f"tool error rate {s['tool_error_rate']:.1%}; failed {s['errors']}, infra errors {s['infra_errors']}, "
        f"environment errors {s.get('env_errors', 0)}; "
        f"ran {outcome.ran}, skipped {outcome.skipped} finished"
    )
    if s["grades"]:
        console.print("grades: " + ", ".join(f"{g} {n}" for g, n in sorted(s["grades"].items())))
    if outcome.report:
        console.print(f"report: {outcome.report} (+ report.html)")
    return 0


def cmd_eval_report(args: argparse.Namespace) -> int:
    from arborl.eval.report import write_report

    try:
        md, page, _ = write_report(args.runs, args.out)
    except FileNotFoundError as e:
        console.print(f"[red]{e}[/red]")
        return 2
    console.print(f"wrote {md} and {page}")
    return 0


def register(add: Any) -> None:
    sp = add("eval", "evaluate an agent on a task suite (resumable; per-instance outputs; report)", cmd_eval)
    sp.add_argument("--list", action="store_true", help="list the registered suites and exit")
    sp.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE",
        help="import a module (dotted name or .py file) first, for the suites and SWE environments "
        "it registers; repeatable",
    )
    sp.add_argument(
        "overrides", nargs="*", help="Hydra overrides of cli/conf/eval.yaml, e.g. suite=swe-mini agent=gold"
    )
    sp = add(
        "eval-report",
        "report (Markdown + HTML + plots) on evaluation runs; several: compared",
        cmd_eval_report,
    )
    sp.add_argument("runs", nargs="+", help="evaluation run directories")
    sp.add_argument(
        "--out", default=None, help="output directory (default: the run's; several: a compare-* directory)"
    )
