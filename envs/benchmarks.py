"""What `arborl eval` needs from a benchmark beyond playing its episodes: the seam between the
evaluation loop and every benchmark's own grading.

    register_env("myorg/Quiz-v0", QuizEnv, benchmark="mypkg.quiz:QUIZ")   # or register_benchmark
    hook = benchmark_for(suite)            # the env id's hook, else the env-graded default
    tasks = await hook.prepare(tasks, ctx)                 # images, repositories
    grade = await hook.grade(env, task, record, ctx)       # one episode (or one prediction)
    tables = hook.report_tables(final_results)             # its own rows in the report
    source = hook.predictions(path, tasks, ctx)            # stored outputs, no agent run
    files = hook.episode_files(record)                     # what an episode leaves (a patch)

A hook is registered per env id, as the env is (`register_env(..., benchmark=...)`), so eval
imports no benchmark and no env family: it asks the registry. The default hook, `Benchmark`,
is the env-graded one: the episode's total reward is its score and the suite says what
success is (`Suite.success`: the one definition, training's held-out evaluation asks it too).
SWE-bench's (`arborl.envs.code.swe_grading`) grades a patch in a fresh sandbox; BFCL's
(`arborl.envs.bfcl.result_files`) also re-scores bfcl-eval's result files. A grade says why
an attempt is unresolved in the benchmark's own words (`Grade.unresolved_kind`, one of the
hook's `unresolved_kinds`; `Grade.why`), and a hook adds its own tables to the report
(`report_tables`): the headline and the report show them without eval knowing the words.
A hook's own settings are its section of eval's configuration (`Benchmark.options`: SWE-bench's
`swe.*`, BFCL's `bfcl.*`), validated with the rest and handed to it as `GradeContext.options`.

Also here, because hooks and the evaluation loop both speak them: `EpisodeRecord` (what an
attempt produced), `InfraError` (the sandbox layer failed: retried) and `EnvironmentBroken`
(the task's environment failed, not the agent: never a score).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import gymnasium
from pydantic import BaseModel

from arborl.tasks import Suite, Task, episode_score
from arborl.tasks.common import load_entry_point


class InfraError(RuntimeError):
    """The sandbox layer failed (not the agent): the attempt is retried unless `permanent`."""

    def __init__(self, message: str, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class EnvironmentBroken(RuntimeError):
    """The task's environment, not the agent, failed (stored as `env_error`: unresolved,
    retried on resume). `grade`: what grading found, kept in the instance's outputs."""

    def __init__(self, message: str, grade: Grade | None = None) -> None:
        super().__init__(message)
        self.grade = grade


#: `info["sandbox_fault"]` when the agent's actions made its sandbox fail; any other value, or
#: none (envs from before the key, failures the env cannot attribute), is the infrastructure's.
AGENT_FAULT = "agent"


@dataclass(frozen=True)
class SandboxFailure:
    why: str
    by_agent: bool


@dataclass
class EpisodeRecord:
    """What one attempt produced: the chat, the step infos and rewards, its tokens."""

    messages: list[dict[str, Any]]
    infos: list[dict[str, Any]]
    rewards: list[float]
    terminated: bool = False
    truncated: bool = False
    error: str | None = None
    prompt_tokens: int = 0
    response_tokens: int = 0
    tokens_exact: bool = False
    trajectory: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: PNG bytes of the screenshot each observation carried, keyed by turn (0: after reset);
    #: empty for text envs.
    screenshots: dict[int, bytes] = field(default_factory=dict)

    @property
    def turns(self) -> int:
        return sum(m.get("role") == "assistant" for m in self.messages)

    def sandbox_failure(self) -> SandboxFailure | None:
        """How the episode's sandbox failed mid-episode, if it did (the last step that says so)."""
        for info in reversed(self.infos):
            if info.get("sandbox_error"):
                return SandboxFailure(str(info["sandbox_error"]), info.get("sandbox_fault") == AGENT_FAULT)
        return None

    def final(self, key: str) -> Any:
        """The last value of `key` in the step infos (e.g. the verifier's, the model patch)."""
        for info in reversed(self.infos):
            if key in info:
                return info[key]
        return None


@dataclass
class Grade:
    """A benchmark's verdict on one attempt."""

    score: float
    success: bool
    label: str = ""
    """The benchmark's own verdict word (SWE-bench: FULL / PARTIAL / NO); '' where it has none."""
    details: dict[str, Any] = field(default_factory=dict)
    """Kept with the result (`details` in the store, the report's why)."""
    files: dict[str, str | bytes] = field(default_factory=dict)
    """Per-instance output files (name → content), written next to the transcript."""
    error: str = ""
    """Why the grade gave no credit, as the benchmark codes it (SWE-bench: `empty_patch`,
    `no_patch: <why>`); counted in summary.json's `grade_errors` by the part before ':'."""
    unresolved_kind: str = ""
    """The benchmark's own kind of an unresolved attempt, a key of its hook's
    `unresolved_kinds` (its own count in the headline); '' for a plain "failed"."""
    why: str = ""
    """One line on why the attempt is unresolved, in the benchmark's terms (the report's error
    column, the console); '' to let the report say `grade: <error>`."""
    why_text: str = ""
    """A longer explanation under `why` (the HTML report folds it out, the console indents it)."""


@dataclass
class GradeContext:
    """What a hook may use: the run's sandbox pool and configuration, the agent kind."""

    suite: Suite
    pool: Any
    config: Any
    """The evaluation's configuration (`arborl.eval.EvalConfig`)."""
    agent: str = "model"
    """"gold", "empty" or "model": a gold policy that fails means the environment is broken."""
    options: Any = None
    """The hook's own section of that configuration (`Benchmark.options`), validated; None
    where the hook has none or the context was built without a configuration."""


class PredictionSource(Protocol):
    """Stored outputs graded without an agent run: each task's "episode" is its stored output."""

    def select(self, tasks: list[Task]) -> list[Task]: ...

    async def run(self, env: gymnasium.Env, task: Task, sample: int, max_turns: int) -> EpisodeRecord: ...

    async def close(self) -> None: ...

    def report(self, console: Any, results: Sequence[Any], run_dir: Path) -> dict[str, Any] | None:
        """The benchmark's own summary of the run (printed, and kept in summary.json), or None."""
        ...


class GradedResult(Protocol):
    """What a hook reads of a stored result (`arborl.eval.InstanceResult`) to report on a run."""

    @property
    def success(self) -> bool: ...

    @property
    def grade(self) -> str:
        """The grade's verdict word (`Grade.label`), or the hook's `ungraded_label`."""
        ...

    @property
    def details(self) -> dict[str, Any]:
        """The grade's `details` as stored (and what the run added to them)."""
        ...


@dataclass(frozen=True)
class ReportTable:
    """A benchmark's own table in the report: one row per run, under `columns` (the report
    puts the run's name first). Kept in summary.json, so a stored run reports without its
    benchmark registered."""

    title: str
    columns: list[str]
    row: list[Any]

    def as_dict(self) -> dict[str, Any]:
        return {"title": self.title, "columns": list(self.columns), "row": list(self.row)}


class Benchmark:
    """The env-graded default: an episode's score is its total reward, clipped to [0, 1]; its
    success is the suite's. Subclass and override what a benchmark grades its own way."""

    name = "env"
    #: The benchmark's own kinds of unresolved attempt (a `Grade.unresolved_kind`), each with
    #: its (singular, plural) label for the headline: counted apart from the generic "failed"
    #: and listed right after it (SWE-bench: `patch_apply`, "patch-apply failure(s)").
    unresolved_kinds: ClassVar[Mapping[str, tuple[str, str]]] = {}
    #: The benchmark's own section of `arborl eval`'s configuration: its key and the pydantic
    #: model of its settings (SWE-bench: ``("swe", SWEOptions)``, set as ``swe.images=off``).
    #: Validated with the rest of the configuration (an unknown key is an error), given to
    #: the hook as `GradeContext.options`; None: the benchmark has no settings.
    options: ClassVar[tuple[str, type[BaseModel]] | None] = None
    #: Keys of the step infos that `episode_files` writes as files, left out of infos.json.
    info_keys_in_files: ClassVar[tuple[str, ...]] = ()

    async def prepare(self, tasks: list[Task], ctx: GradeContext) -> list[Task]:
        """The tasks ready to run (e.g. on instance images); by default, as they are."""
        return tasks

    async def grade(self, env: gymnasium.Env, task: Task, record: EpisodeRecord, ctx: GradeContext) -> Grade:
        """Grade one finished episode; raise `InfraError` or `EnvironmentBroken` for failures
        that are not the agent's."""
        total = float(sum(record.rewards))
        return Grade(score=episode_score(total), success=ctx.suite.success(total))

    def ungraded_label(self, task: Task) -> str:
        """The verdict word of an attempt that ended without a grade (a failure, a timeout)."""
        return ""

    def success_rule(self, suite: Suite) -> str:
        """What success means for this suite, in words (the report says it)."""
        return suite.success_rule

    def reader_options(self, options: Any = None) -> dict[str, Any]:
        """Keyword arguments this benchmark's env gives `arborl.tasks.user_suites.suite_from_path`
        (the desktop: what it can run, so a task it cannot is refused as the suite loads;
        SWE-bench: where the repositories are). `options`: the hook's section, validated."""
        return {}

    def episode_files(self, record: EpisodeRecord) -> dict[str, str | bytes]:
        """Files an episode leaves besides its transcript, whatever its grade (name →
        content, written next to the transcript); none by default."""
        return {}

    def report_tables(self, results: Sequence[GradedResult]) -> list[ReportTable]:
        """The benchmark's own tables of a run, from its final results (those that came to a
        grade or an ungraded verdict: not infrastructure or environment errors); none by default."""
        return []

    def predictions(self, path: str, tasks: list[Task], ctx: GradeContext) -> PredictionSource:
        """Stored outputs at `path` to grade instead of running an agent."""
        raise ValueError(
            f"predictions= grades stored outputs, which suite {ctx.suite.name!r} does not take: "
            "SWE-bench suites take a predictions file, BFCL suites bfcl-eval result files"
        )


ENV_GRADED = Benchmark()
_HOOKS: dict[str, Benchmark | str] = {}


def same_on_every_node(per_node: Mapping[str, list[Task]], fix: str) -> list[Task]:
    """The tasks every sandbox node prepared (`RaySandboxPool.on_each_node`'s results), which
    must be the same on every node: a task that would differ by where its sandbox lands is
    refused before the run (`SandboxUnavailable`, `fix` saying what to do)."""
    from arborl.sandboxes import SandboxUnavailable

    first, *others = per_node.values()
    if any([t.model_dump() for t in other] != [t.model_dump() for t in first] for other in others):
        raise SandboxUnavailable(f"the sandbox nodes prepared the same tasks differently: {fix}")
    return first


def register_benchmark(env_id: str, hook: Benchmark | str, *, force: bool = False) -> None:
    """Say how `arborl eval` grades the suites that run on `env_id` (a `Benchmark`, or the
    `"module:attribute"` that names one, imported when first used)."""
    if env_id in _HOOKS and not force and _HOOKS[env_id] != hook:
        raise ValueError(f"{env_id} already has a benchmark hook; pass force=True to replace it")
    _HOOKS[env_id] = hook


def benchmark_for(suite: Suite | str) -> Benchmark:
    """The hook of the suite's env (its env id's), or the env-graded default."""
    env_id = suite if isinstance(suite, str) else suite.env_id
    hook = _HOOKS.get(env_id, ENV_GRADED)
    if isinstance(hook, str):
        loaded = load_entry_point(hook)
        hook = loaded() if isinstance(loaded, type) else loaded
        if not isinstance(hook, Benchmark):
            raise TypeError(f"{_HOOKS[env_id]} is not a arborl.envs.benchmarks.Benchmark")
        _HOOKS[env_id] = hook
    return hook


def reader_options(sections: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What every registered benchmark gives the reader of a user's files (`suite=PATH`);
    `sections`: the benchmarks' validated sections of the configuration, by key."""
    options: dict[str, Any] = {}
    for env_id in list(_HOOKS):
        hook = benchmark_for(env_id)
        own = (sections or {}).get(hook.options[0]) if hook.options else None
        options.update(hook.reader_options(own))
    return options


def benchmark_sections() -> dict[str, type[BaseModel]]:
    """The configuration sections of every registered benchmark (`Benchmark.options`), by key;
    two hooks may share a key only with the same model."""
    found: dict[str, type[BaseModel]] = {}
    for env_id in list(_HOOKS):
        hook = benchmark_for(env_id)
        if hook.options is None:
            continue
        key, model = hook.options
        if found.setdefault(key, model) is not model:
            raise ValueError(
                f"benchmark hooks give the configuration section {key!r} two models "
                f"({found[key].__qualname__}, {model.__qualname__}): give {hook.name!r}'s another key"
            )
    return found


__all__ = [
    "AGENT_FAULT",
    "ENV_GRADED",
    "Benchmark",
    "EnvironmentBroken",
    "EpisodeRecord",
    "Grade",
    "GradeContext",
    "GradedResult",
    "InfraError",
    "PredictionSource",
    "ReportTable",
    "SandboxFailure",
    "benchmark_for",
    "benchmark_sections",
    "reader_options",
    "register_benchmark",
]
