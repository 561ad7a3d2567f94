"""Task suites: named, lazily loaded collections of tasks, with the env that runs them.

    from arborl.tasks import get_suite, list_suites
    suite = get_suite("tool-mini")
    tasks = suite.tasks()                      # loaded on first use, then cached
    env = gymnasium.make(suite.env_id, **suite.env_kwargs)
    policy = suite.gold_policy(tasks[0])       # a scripted solution, for validating the suite

A suite names its loader, and optionally its scripted gold and empty policies, as
``"package.module:function"`` entry points (or callables), so listing suites imports nothing
heavy and a suite whose module cannot be imported says why only when it is used.

A policy is what `arborl.envs.run_episode` drives: ``(messages, info) -> reply`` (sync or
async). `gold` and `empty` are factories ``task -> policy``: the gold policy solves the task
with the env's own tools (a validation run must resolve 100 %), the empty policy gives up at
once (it must resolve 0 %).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .entry_points import EntryPointError, load_entry_point
from .spec import Task


class Policy(Protocol):
    """A scripted text policy, ``(messages, info) -> reply`` (sync or async): what
    `arborl.envs.run_episode` drives, what a suite's gold and empty factories return, what
    `Agent.run_episode(demo=...)` replays. The one definition: import it from here."""

    def __call__(self, messages: list[dict[str, Any]], info: dict[str, Any], /) -> Awaitable[str] | str: ...


PolicyFactory = Callable[[Task], Policy]


class SuiteError(LookupError):
    """A suite is unknown or cannot be loaded; the message lists what exists."""


def resolve(entry: str | Callable[..., Any]) -> Callable[..., Any]:
    """A callable, or the object a ``"package.module:attribute"`` string names."""
    if callable(entry):
        return entry
    try:
        obj = load_entry_point(entry)
    except EntryPointError as e:
        raise SuiteError(str(e)) from e
    if not callable(obj):
        raise SuiteError(f"{entry} is not callable")
    return obj  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Suite:
    """A named task collection and how to run it."""

    name: str
    """Registry key, e.g. ``swe-mini``."""
    env_id: str
    """The Gymnasium id that runs these tasks, e.g. ``arborl/Code-v0``."""
    loader: str | Callable[[], Sequence[Task]]
    """Returns the tasks (``"module:function"`` or a callable); called once, then cached."""
    description: str = ""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments for ``gymnasium.make(env_id, ...)``."""
    gold: str | PolicyFactory | None = None
    """Factory of a scripted policy that solves a task (suite validation: 100 %)."""
    empty: str | PolicyFactory | None = None
    """Factory of a policy that gives up at once (suite validation: 0 %)."""
    max_turns: int = 30
    """Default turn budget of an episode of this suite."""
    tags: tuple[str, ...] = ()
    _cache: list[list[Task]] = field(default_factory=list, repr=False, compare=False)

    def tasks(self) -> list[Task]:
        """The suite's tasks (loaded once)."""
        if not self._cache:
            tasks = list(resolve(self.loader)())
            ids = [t.id for t in tasks]
            if len(ids) != len(set(ids)):
                dup = sorted({i for i in ids if ids.count(i) > 1})
                raise SuiteError(f"suite {self.name!r} has duplicate task ids: {dup[:5]}")
            self._cache.append(tasks)
        return list(self._cache[0])

    def task(self, task_id: str) -> Task:
        for t in self.tasks():
            if t.id == task_id:
                return t
        raise SuiteError(f"suite {self.name!r} has no task {task_id!r}")

    def gold_policy(self, task: Task) -> Policy:
        return self._policy("gold", self.gold, task)

    def empty_policy(self, task: Task) -> Policy:
        return self._policy("empty", self.empty, task)

    def _policy(self, kind: str, factory: str | PolicyFactory | None, task: Task) -> Policy:
        if factory is None:
            raise SuiteError(f"suite {self.name!r} has no {kind} policy")
        return resolve(factory)(task)  # type: ignore[no-any-return]


SUITES: dict[str, Suite] = {}


def register_suite(suite: Suite, *, force: bool = False) -> Suite:
    """Add a suite to the registry (an existing name needs ``force=True``)."""
    if suite.name in SUITES and not force and SUITES[suite.name] != suite:
        raise SuiteError(f"suite {suite.name!r} is already registered; pass force=True to replace it")
    SUITES[suite.name] = suite
    return suite


def get_suite(name: str) -> Suite:
    try:
        return SUITES[name]
    except KeyError:
        raise SuiteError(f"unknown suite {name!r}; known: {', '.join(sorted(SUITES)) or 'none'}") from None


def list_suites() -> list[Suite]:
    return [SUITES[k] for k in sorted(SUITES)]


#: Built-in suites. A suite module adds itself here with one line.
BUILTIN_SUITES: tuple[Suite, ...] = (
    Suite(
        "swe-mini",
        "arborl/Code-v0",
        "arborl.tasks.swe_mini:load_tasks",
        description="12 SWE-bench instances over 4 small Python repositories (FAIL_TO_PASS/PASS_TO_PASS)",
        gold="arborl.tasks.swe_mini:gold_policy",
        empty="arborl.tasks.swe_mini:empty_policy",
        max_turns=20,
        tags=("code", "swe-bench"),
    ),
    Suite(
        "swe-real",
        "arborl/Code-v0",
        "arborl.tasks.swe_real:load_tasks",
        description="SWE-bench instances cut from real repositories' history (src layouts, unittest, wheels)",
        gold="arborl.tasks.swe_real:gold_policy",
        empty="arborl.tasks.swe_real:empty_policy",
        max_turns=20,
        tags=("code", "swe-bench", "real"),
    ),
    Suite(
        "tool-mini",
        "arborl/Tool-v0",
        "arborl.tasks.tool_mini:load_suite",
        description="120 templated tool-use problems: calculator, search over a small corpus, both",
        gold="arborl.tasks.tool_mini:gold_policy",
        empty="arborl.tasks.tool_mini:empty_policy",
        max_turns=6,
        tags=("tool",),
    ),
    Suite(
        "tool-maze",
        "arborl/Tool-v0",
        "arborl.tasks.tool_maze:load_suite",
        description="64 three-door mazes searched room by room: a wrong door costs a turn of a budget that tolerates one",
        gold="arborl.tasks.tool_maze:gold_policy",
        empty="arborl.tasks.tool_maze:empty_policy",
        max_turns=5,
        tags=("tool", "multi-turn"),
    ),
    Suite(
        "tool-doors",
        "arborl/Tool-v0",
        "arborl.tasks.tool_doors:load_suite",
        description="64 houses of three doors opened by colour (the question says which leads on): a wrong door costs a turn of a budget that tolerates one",
        gold="arborl.tasks.tool_doors:gold_policy",
        empty="arborl.tasks.tool_doors:empty_policy",
        max_turns=5,
        tags=("tool", "multi-turn"),
    ),
    Suite(
        "tool-mix",
        "arborl/Tool-v0",
        "arborl.tasks.tool_mix:load_suite",
        description="tool-mini's first 64 questions and 64 houses where blue doors lead on, unsaid, alternating",
        gold="arborl.tasks.tool_mix:gold_policy",
        empty="arborl.tasks.tool_mix:empty_policy",
        max_turns=6,
        tags=("tool", "multi-turn"),
    ),
    Suite(
        "tool-mix-houses",
        "arborl/Tool-v0",
        "arborl.tasks.tool_mix:load_houses",
        description="tool-mix's 64 houses alone (blue doors lead on, unsaid): the learning benchmark's suite",
        gold="arborl.tasks.tool_doors:gold_policy",
        empty="arborl.tasks.tool_doors:empty_policy",
        max_turns=5,
        tags=("tool", "multi-turn"),
    ),
    Suite(
        "desktop-mini",
        "arborl/Desktop-v0",
        "arborl.tasks.osworld:load_desktop_mini",
        description="9 OSWorld-format desktop tasks: text editor, file manager, terminal, spreadsheet, infeasible",
        gold="arborl.tasks.osworld:desktop_mini_gold",
        empty="arborl.tasks.osworld:desktop_mini_empty",
        max_turns=15,
        tags=("desktop", "osworld"),
    ),
    Suite(
        "web-mini",
        "arborl/Web-v0",
        "arborl.tasks.web:load_web_mini",
        description="11 web tasks on self-hosted sites: a shop (search, filters, cart, checkout), an admin console, both",
        gold="arborl.tasks.web:gold_policy",
        empty="arborl.tasks.web:empty_policy",
        max_turns=30,
        tags=("web",),
    ),
    Suite(
        "web-miniwob",
        "arborl/MiniWoB-v0",
        "arborl.tasks.miniwob:load_web_miniwob",
        description="MiniWoB++ tasks with a scripted solution (2 seeds each), scored by their own JavaScript",
        gold="arborl.tasks.miniwob:gold_policy",
        empty="arborl.tasks.miniwob:empty_policy",
        max_turns=8,
        tags=("web", "miniwob"),
    ),
)

#: Benchmarks with no scripted solution (run with a model): registered, but not in the gold/empty
#: validation of `BUILTIN_SUITES` (tests/eval/test_suite_validation.py).
MODEL_ONLY_SUITES: tuple[Suite, ...] = (
    Suite(
        "web-miniwob-all",
        "arborl/MiniWoB-v0",
        "arborl.tasks.miniwob:load_web_miniwob_all",
        description="every MiniWoB++ task arborl's actions can express (docs/web.md lists the rest)",
        empty="arborl.tasks.miniwob:empty_policy",
        max_turns=15,
        tags=("web", "miniwob"),
    ),
)


def register_builtin_suites() -> None:
    for suite in (*BUILTIN_SUITES, *MODEL_ONLY_SUITES):
        register_suite(suite, force=True)
