"""Task suites: named, lazily loaded collections of tasks, with the env that runs them.

    from arborl.tasks import get_suite, list_suites
    suite = get_suite("tool-mini")
    tasks = suite.tasks()                      # loaded on first use, then cached
    env = gymnasium.make(suite.env_id, **suite.env_kwargs)
    policy = suite.gold_policy(tasks[0])       # a scripted solution, for validating the suite

A suite names its loader, and optionally its scripted gold and empty policies, as
``"package.module:function"`` entry points (or callables), so listing suites imports nothing
heavy and a suite whose module cannot be imported says why only when it is used.

A policy is what `arborl.envs.episodes.run_episode` drives: ``(messages, info) -> reply`` (sync or
async). `gold` and `empty` are factories ``task -> policy``: the gold policy solves the task
with the env's own tools (a validation run must resolve 100 %), the empty policy gives up at
once (it must resolve 0 %).

Each benchmark folder registers its own suites: `arborl.tasks.<folder>.suites` holds one
`register_suite(Suite(...))` per suite, and the registry imports every such module the first
time it is used (so adding a benchmark touches no table here, and importing `arborl.tasks`
imports no benchmark). A user's module registers the same way (`arborl eval --import my_suites`),
and so does an installed package through its `arborl.envs` entry point (`env_packages`): the
lookups here load those once, after the built-in suites.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .common import EntryPointError, Policy, PolicyFactory, load_entry_point
from .env_packages import BUILT_IN, load_env_packages, note_registered, registering_as
from .task_types import Task


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


#: Scores are sums of float rewards: a full score may come out a hair under 1.
SCORE_TOLERANCE = 1e-9


def episode_score(total_reward: float) -> float:
    """An episode's score: its total reward, clipped to [0, 1] (what reports and success read)."""
    return max(0.0, min(1.0, float(total_reward)))


def succeeded(total_reward: float, success_score: float = 1.0) -> bool:
    """Whether an episode succeeded: its score reaches `success_score` (a suite's own, by
    `Suite.success`; 1, a full score, unless the suite says otherwise)."""
    return episode_score(total_reward) >= success_score - SCORE_TOLERANCE


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
    success_score: float = 1.0
    """An episode succeeds when its score (`episode_score`: the total reward, clipped to
    [0, 1]) reaches this; training's held-out success and `arborl eval`'s both ask `success`."""
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

    def success(self, total_reward: float) -> bool:
        """Whether an episode with this total reward succeeded: the one definition, used by
        training's held-out evaluation and by `arborl eval` alike."""
        return succeeded(total_reward, self.success_score)

    @property
    def success_rule(self) -> str:
        """What `success` means, in words, for reports."""
        return f"score >= {self.success_score:g} (score: the episode's total reward, clipped to [0, 1])"

    def gold_policy(self, task: Task) -> Policy:
        return self._policy("gold", self.gold, task)

    def empty_policy(self, task: Task) -> Policy:
        return self._policy("empty", self.empty, task)

    def _policy(self, kind: str, factory: str | PolicyFactory | None, task: Task) -> Policy:
        if factory is None:
            raise SuiteError(f"suite {self.name!r} has no {kind} policy")
        return resolve(factory)(task)  # type: ignore[no-any-return]


SUITES: dict[str, Suite] = {}
_builtins_loaded = False  # set before the folders register, so their register_suite calls do not recurse


def load_builtin_suites() -> None:
    """Import the `suites` module of every benchmark folder under `arborl.tasks` (once); each
    registers its suites as it is imported."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True
    package = importlib.import_module(__package__ or "arborl.tasks")
    with registering_as(BUILT_IN):
        for folder in sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.ispkg):
            name = f"{package.__name__}.{folder}.suites"
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)


def _load_all() -> None:
    """The built-in suites, then those of installed env packages (`env_packages`), each once."""
    load_builtin_suites()
    load_env_packages()


def register_suite(suite: Suite, *, force: bool = False) -> Suite:
    """Add a suite to the registry (an existing name needs ``force=True``).

    Only the built-in suites are loaded first, not the installed packages' (that would import
    every package to register one suite); a package that registers a name taken by then is
    reported broken (`arborl envs list`)."""
    load_builtin_suites()
    if suite.name in SUITES and not force and SUITES[suite.name] != suite:
        raise SuiteError(f"suite {suite.name!r} is already registered; pass force=True to replace it")
    note_registered("suite", suite.name, replaced=suite.name in SUITES and SUITES[suite.name] != suite)
    SUITES[suite.name] = suite
    return suite


def is_registered(name: str) -> bool:
    _load_all()
    return name in SUITES


def get_suite(name: str) -> Suite:
    """The registered suite `name`, or, for a file or folder that is not a suite's name, the
    suite of the user's files there (`user_suites.suite_from_path`: what `arborl eval
    suite=PATH` reads; here without SWE-bench's repository options), so `arborl train
    tasks.train=suite:PATH tasks.eval_suite=PATH` takes them too. Installed env packages'
    suites are registered by then (`env_packages`)."""
    _load_all()
    if name in SUITES:
        return SUITES[name]
    from .user_suites import looks_like_path, suite_from_path  # the benchmarks' readers, only for a path

    if looks_like_path(name):
        key = (name, _stamp(name))
        if key not in _PATH_SUITES:  # a trainer asks twice (its stream, its held-out tasks)
            _PATH_SUITES[key] = suite_from_path(name)
        return _PATH_SUITES[key]
    raise SuiteError(f"unknown suite {name!r}; known: {', '.join(sorted(SUITES)) or 'none'}")


_PATH_SUITES: dict[tuple[str, int], Suite] = {}


def _stamp(name: str) -> int:
    """When the file or folder last changed (-1: it does not exist), so an edit reloads it."""
    try:
        return os.stat(name).st_mtime_ns
    except OSError:
        return -1


def list_suites() -> list[Suite]:
    _load_all()
    return [SUITES[k] for k in sorted(SUITES)]
