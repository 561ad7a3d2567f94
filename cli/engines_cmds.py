"""`arborl engines`: the registered inference engines (arborl.agents.engines.registry)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

from .config import config_cells

console = Console(soft_wrap=True)


def cmd_engines(args: argparse.Namespace) -> int:
    from arborl.agents.engines import ENGINES

    table = Table("engine", "class", "config", "config keys", title="registered engines")
    for kind in sorted(ENGINES):
        entry = ENGINES[kind]
        name, keys = config_cells(entry)
        engine = (
            entry.engine
            if isinstance(entry.engine, str)
            else f"{entry.engine.__module__}:{entry.engine.__qualname__}"
        )
        table.add_row(kind, engine, name, keys)
    console.print(table)
    return 0


def register(add: Any) -> None:
    add("engines", "list the registered inference engines and their config keys", cmd_engines)
