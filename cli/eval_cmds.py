"""`arborl eval` (run a suite with an agent, resumable) and `arborl eval-report RUN...`."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .config import SHARED_SECTIONS, ConfigError, load_config, section, sections, validated

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from arborl.eval.config import EvalConfig
    from arborl.eval.runner import EvalOutcome

console = Console(soft_wrap=True)  # long lines stay whole in logs and pipes
#: Sections of the root config that are not the eval's own (where sandboxes run, the demo).
_SHARED = SHARED_SECTIONS
MAX_WHYS_SHOWN, WHY_LINES_SHOWN = 5, 8


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


def compose_eval(overrides: list[str]) -> tuple[DictConfig, EvalConfig]:
    """The composed config of `arborl eval` and its own keys as an `EvalConfig` (with no
    overrides: EvalConfig's defaults); `ConfigError` names a wrong key."""
    from arborl.eval.config import EvalConfig

    cfg = load_config(overrides, name="eval")
    return cfg, validated(EvalConfig, sections(cfg))


def cmd_eval(args: argparse.Namespace) -> int:
    try:
        import_user_modules(args.imports or [])
    except Exception as e:  # the user's module: say which one and why, do not trace back
        console.print(f"[red]--import failed: {type(e).__name__}: {e}[/red]")
        return 2
    if args.list:
        return _list_suites()
    from arborl.eval.result_store import RunMismatch
    from arborl.eval.runner import run_eval
    from arborl.sandboxes import PoolConfig
    from arborl.tasks import SuiteError

    try:
        cfg, ecfg = compose_eval(args.overrides)
    except ConfigError as e:
        console.print(f"[red]invalid eval config:[/red] {escape(str(e))}", highlight=False)
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
    _print_outcome(outcome, f"{ecfg.suite} · {ecfg.agent}")
    return 0


def _print_outcome(outcome: EvalOutcome, title: str) -> None:
    """The headline over every sample, what else was measured, the verdicts, and each sample
    that is unresolved in one of the benchmark's own kinds, with its grade's why."""
    from arborl.eval.report import error_cell
    from arborl.eval.result_store import read_results
    from arborl.eval.summary import UNRESOLVED_KINDS, benchmark_kind

    s = outcome.summary
    pk = ", ".join(f"pass@{k} {v:.1%}" for k, v in s["pass_at_k"].items() if v is not None)
    console.print(f"[bold]{title}[/bold]: [bold]{s['headline']}[/bold]")
    console.print(
        f"{pk}; turns {s['turns_mean']:.2f}; tool error rate {s['tool_error_rate']:.1%}; "
        f"retried {s['retried']}; ran {outcome.ran}, skipped {outcome.skipped} finished"
    )
    if s["grades"]:
        why = ", ".join(f"{e} {n}" for e, n in sorted(s["grade_errors"].items()))
        grades = ", ".join(f"{g} {n}" for g, n in sorted(s["grades"].items()))
        console.print(f"grades: {grades}" + (f" ({why})" if why else ""))
    if any(n for kind, n in s["unresolved_by_kind"].items() if kind not in UNRESOLVED_KINDS):
        explained = [r for r in read_results(outcome.run_dir)[1] if not r.success and benchmark_kind(r)]
        for r in explained[:MAX_WHYS_SHOWN]:
            first, _, more = error_cell(r).partition("\n")
            console.print(f"  {r.instance_id}#{r.sample}: {first}", markup=False, highlight=False)
            for line in more.splitlines()[:WHY_LINES_SHOWN]:
                console.print(f"      {line}", markup=False, highlight=False)
        if len(explained) > MAX_WHYS_SHOWN:
            console.print(f"  ... and {len(explained) - MAX_WHYS_SHOWN} more (report.md, error column)")
    if outcome.report:
        console.print(f"report: {outcome.report} (+ report.html)")


def cmd_eval_report(args: argparse.Namespace) -> int:
    from arborl.eval.report import write_report

    try:
        md, page, _ = write_report(args.runs, args.out)
    except FileNotFoundError as e:
        console.print(f"[red]{e}[/red]")
        return 2
    from arborl.eval.result_store import read_results
    from arborl.eval.summary import summarize

    for run in args.runs:  # each run's headline, as its own `arborl eval` printed it
        info, results = read_results(run)
        headline = summarize(results, info.get("config", {}).get("pass_k", [1]))["headline"]
        console.print(f"[bold]{Path(run).name}[/bold]: {headline}")
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
