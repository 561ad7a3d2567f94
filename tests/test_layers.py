"""Imports follow STYLE.md's direction with no exception, read from the source's syntax tree.

    trainer → agents → envs → tasks      eval → agents → envs → tasks, eval → tasks
    envs → sandboxes      trainer → kernels      agents → kernels

and what those give by going on (trainer → envs: trainer → agents → envs). `sandboxes`,
`kernels` and `tasks` import nothing of the layers above them; `cli` may import anything.
Every import counts: at the top of a module, inside a function (a lazy import), under
`TYPE_CHECKING` (a type is still a dependency), relative ones resolved to the layer they
reach; and so does a `"arborl.layer.module:attribute"` entry point, which
`load_entry_point` imports when it is used.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Each layer and the layers it may import directly (STYLE.md, "Imports go one way").
DIRECT: dict[str, frozenset[str]] = {
    "sandboxes": frozenset(),
    "kernels": frozenset(),
    "tasks": frozenset(),
    "envs": frozenset({"tasks", "sandboxes"}),
    "agents": frozenset({"envs", "kernels"}),
    "trainer": frozenset({"agents", "kernels"}),
    "eval": frozenset({"agents", "tasks"}),
    "cli": frozenset({"sandboxes", "kernels", "tasks", "envs", "agents", "trainer", "eval"}),
}
ENTRY_POINT = re.compile(r"arborl\.(\w+)(\.\w+)*:\w+(\.\w+)*")


def reachable(layer: str) -> frozenset[str]:
    """The layers `layer` may import: its direct ones and, transitively, theirs."""
    seen: set[str] = set()
    todo = list(DIRECT[layer])
    while todo:
        other = todo.pop()
        if other not in seen:
            seen.add(other)
            todo.extend(DIRECT[other])
    return frozenset(seen)


def module_name(path: Path) -> list[str]:
    """`tasks/swebench/real/__init__.py` → ["arborl", "tasks", "swebench", "real"]."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ["arborl", *parts]


def imported(path: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every arborl module or entry point that `path` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path)
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield node.lineno, target
            if target == "arborl":  # from arborl import envs
                for alias in node.names:
                    yield node.lineno, f"arborl.{alias.name}"
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and ENTRY_POINT.fullmatch(node.value)
        ):
            yield node.lineno, node.value.partition(":")[0]


def layer_of(dotted: str) -> str | None:
    parts = dotted.split(".")
    if len(parts) >= 2 and parts[0] == "arborl" and parts[1] in DIRECT:
        return parts[1]
    return None


def violations(layer: str) -> list[str]:
    allowed = reachable(layer) | {layer}
    found = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        for line, dotted in sorted(imported(path)):
            other = layer_of(dotted)
            if other is not None and other not in allowed:
                found.append(f"{path.relative_to(ROOT)}:{line} imports {dotted} ({layer} → {other})")
    return found


@pytest.mark.parametrize("layer", sorted(DIRECT))
def test_a_layer_imports_only_the_layers_below_it(layer):
    found = violations(layer)
    assert not found, "imports against STYLE.md's direction:\n" + "\n".join(found)


def test_every_layer_folder_is_in_the_graph():
    """A new top-level package must be placed in the graph, or its imports go unchecked."""
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages - {"tests", "bench", "scripts"} == set(DIRECT)


def test_the_reader_sees_what_is_checked(tmp_path, monkeypatch):
    """The checker itself: a TYPE_CHECKING import, a relative one that climbs out of the layer,
    a lazy one and an entry point are all seen; imports within the layer and downwards are not
    reported."""
    layer = tmp_path / "tasks"
    (layer / "toy").mkdir(parents=True)
    (layer / "toy" / "__init__.py").write_text("")
    (layer / "toy" / "doors.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from ..spec import Task\n"
        "from . import maze\n"
        "if TYPE_CHECKING:\n"
        "    from arborl.envs.function_calling import ToolEpisode\n"
        "def f():\n"
        "    from ...eval import runner\n"
        "    return 'arborl.agents.tiny:tiny_model'\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = violations("tasks")
    assert [f.split(" imports ")[1] for f in found] == [
        "arborl.envs.function_calling (tasks → envs)",
        "arborl.eval (tasks → eval)",
        "arborl.agents.tiny (tasks → agents)",
    ]
    assert reachable("trainer") >= {"envs", "tasks", "sandboxes", "kernels"}
    assert "trainer" not in reachable("eval") and "eval" not in reachable("trainer")


def benchmark_modules() -> set[str]:
    """The benchmark folders (`arborl.tasks.<folder>`) and env families (`arborl.envs.<package>`)."""
    return {
        f"arborl.{layer}.{p.name}"
        for layer in ("tasks", "envs")
        for p in (ROOT / layer).iterdir()
        if (p / "__init__.py").is_file()
    }


def test_eval_names_no_benchmark_and_no_env_family():
    """eval grades every suite through its benchmark's hook (`arborl.envs.benchmarks`), so it
    imports no benchmark folder and no env family, not even lazily or by entry point."""
    named = benchmark_modules()
    assert {"arborl.tasks.swebench", "arborl.tasks.bfcl", "arborl.envs.code", "arborl.envs.desktop"} <= named
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {dotted}"
        for path in sorted((ROOT / "eval").rglob("*.py"))
        for line, dotted in imported(path)
        if any(dotted == m or dotted.startswith(m + ".") for m in named)
    ]
    assert not found, "eval names a benchmark:\n" + "\n".join(found)


#: Words of one benchmark's grading (SWE-bench's) that eval and `arborl eval`'s console must
#: leave to its hook: they ask the hook for kinds, tables and whys instead.
GRADE_WORDS = ("patch_apply", "FULL", "first_failing_hunk", "model_patch", "patch.diff")


def test_eval_speaks_no_benchmarks_grade_vocabulary():
    """eval/ and cli/eval_cmds.py hold no benchmark's grading words, in code or prose: a
    benchmark's own unresolved kinds, report tables and explanations come from its hook."""
    files = [*sorted((ROOT / "eval").rglob("*.py")), ROOT / "cli" / "eval_cmds.py"]
    files = [p for p in files if "viewer" not in p.parts]  # shows a run's files, whoever wrote them
    found = [
        f"{path.relative_to(ROOT)}:{n}: {word!r}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for word in GRADE_WORDS
        if word in line
    ]
    assert not found, "eval names a benchmark's grading words:\n" + "\n".join(found)


def test_each_benchmarks_settings_are_its_hooks_section_not_evals_fields():
    """`swe.*` and `bfcl.*` are the SWE-bench and BFCL hooks' own sections (`Benchmark.options`),
    validated by their models, not fields eval declares: eval's config names no benchmark."""
    from arborl.envs.benchmarks import benchmark_for, benchmark_sections
    from arborl.eval.config import EvalConfig

    sections = benchmark_sections()
    assert {"swe", "bfcl"} <= set(sections), sections
    assert not set(EvalConfig.model_fields) & set(sections), "eval declares a benchmark's section"
    assert benchmark_for("arborl/Code-v0").options == ("swe", sections["swe"])
    assert benchmark_for("arborl/BFCL-v0").options == ("bfcl", sections["bfcl"])
