"""`arborl eval`: run a suite's instances with an agent, grade them, store and report.

    outcome = await run_eval(EvalConfig(suite="swe-mini", agent="gold"), sandbox={"type": "docker"})

How a run goes:

1. the suite's tasks (filtered by `tasks` / `limit`), times `samples`, minus the (instance,
   sample) pairs already finished in the run directory's SQLite store (resume);
2. the benchmark prepares its tasks (`arborl.envs.benchmarks`: SWE-bench builds instance images);
3. `concurrency` workers, each with its own env over one `SandboxPool`, take the next item;
   an attempt is the episode (`drivers`) plus its grade (the hook), under a wall-clock limit;
4. an infrastructure failure (a sandbox error: the pool, the container, the engine) retries
   the attempt on a fresh env, up to `retries` times; what the agent does is never retried,
   a sandbox its own actions killed included (`agent_crash`, a failure); an unexpected error
   in one instance is recorded and never stops the others;
5. every result is committed to the store when it is known, and the instance's transcript,
   patch and logs written (`outputs`); at the end: `summary.json` and the report, whose
   rates count every sample, errors as unresolved (`summary`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
import traceback
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium
from gymnasium.envs.registration import load_env_creator
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import arborl.envs  # noqa: F401 - registers the arborl/* env ids (and their benchmark hooks)
from arborl.envs import SandboxEnv, aclose, arelease
from arborl.envs.benchmarks import (
    EnvironmentBroken,
    EpisodeRecord,
    Grade,
    GradeContext,
    InfraError,
    PredictionSource,
    benchmark_for,
    reader_options,
)
from arborl.envs.episodes import on_envs
from arborl.sandboxes import PoolConfig, SandboxPool, make_pool
from arborl.tasks import Suite, Task, get_suite, is_registered
from arborl.tasks.user_suites import looks_like_path, suite_from_path

from .config import EvalConfig
from .drivers import Driver, make_driver
from .outputs import instance_dir, write_outputs
from .result_store import FINAL, InstanceResult, ResultStore
from .screens import RecordScreens
from .summary import UNRESOLVED_KINDS, count_phrase, grade_details, kind_labels, summarize, unresolved_kind

log = logging.getLogger(__name__)


@dataclass
class EvalOutcome:
    run_dir: Path
    summary: dict[str, Any]
    skipped: int
    ran: int
    report: Path | None = None


def resolve_suite(cfg: EvalConfig) -> Suite:
    """The registered suite `cfg.suite` names, or a suite made from the file or directory."""
    if not is_registered(cfg.suite) and looks_like_path(cfg.suite):
        # each benchmark's: what its env can run (the desktop's, for OSWorld files), where
        # its material is (SWE-bench's repositories), from its own section of the config
        return suite_from_path(cfg.suite, **reader_options(cfg.model_extra))
    return get_suite(cfg.suite)


def select_tasks(suite: Suite, cfg: EvalConfig) -> list[Task]:
    tasks = suite.tasks()
    if cfg.tasks:
        known = {t.id for t in tasks}
        missing = [t for t in cfg.tasks if t not in known]
        if missing:
            raise ValueError(f"suite {suite.name!r} has no tasks {missing[:5]}")
        wanted = set(cfg.tasks)
        tasks = [t for t in tasks if t.id in wanted]
    return tasks[: cfg.limit] if cfg.limit else tasks


class EvalRun:
    """One evaluation run (see the module doc)."""

    def __init__(
        self, cfg: EvalConfig, pool: SandboxPool, console: Console, suite: Suite | None = None
    ) -> None:
        self.cfg, self.pool, self.console = cfg, pool, console
        self.suite = suite or resolve_suite(cfg)
        self.benchmark = benchmark_for(self.suite)  # how this suite is prepared and graded
        clash = sorted(set(self.benchmark.unresolved_kinds) & set(UNRESOLVED_KINDS))
        if clash:
            raise ValueError(
                f"benchmark hook {self.benchmark.name!r} declares unresolved kinds {clash} that eval "
                "counts itself: give its own kinds other names"
            )
        self.kinds = kind_labels(self.benchmark.unresolved_kinds)  # the progress bar's labels
        key = self.benchmark.options[0] if self.benchmark.options else None
        self.ctx = GradeContext(self.suite, pool, cfg, cfg.agent, cfg.benchmark_options(key))
        self.predictions: PredictionSource | None = None  # stored outputs to grade, no agent
        if cfg.predictions:
            self.predictions = self.benchmark.predictions(str(cfg.predictions), self.suite.tasks(), self.ctx)
        self.max_turns = cfg.max_turns or self.suite.max_turns
        self.run_dir = cfg.run_dir()
        self.driver: Driver | None = None
        self._sandboxed = self._is_sandboxed(self.suite.env_id)

    @staticmethod
    def _is_sandboxed(env_id: str) -> bool:
        entry = gymnasium.spec(env_id).entry_point
        cls = load_env_creator(entry) if isinstance(entry, str) else entry
        return isinstance(cls, type) and issubclass(cls, SandboxEnv)

    def make_env(self) -> gymnasium.Env:
        kwargs: dict[str, Any] = {**self.suite.env_kwargs, **self.cfg.env_kwargs}
        if self._sandboxed:
            kwargs["pool"] = self.pool
        return gymnasium.make(self.suite.env_id, **kwargs)

    # ---- one attempt -------------------------------------------------------------------------
    async def attempt(
        self, env: gymnasium.Env, task: Task, sample: int
    ) -> tuple[InstanceResult, EpisodeRecord, Grade | None]:
        assert self.driver is not None
        start = time.perf_counter()
        screens = RecordScreens(env) if self.cfg.screenshots else None
        rec = await self.driver.run(screens or env, task, sample, self.max_turns)
        if screens is not None:
            rec.screenshots = screens.pngs
        await arelease(env)
        setup_error = rec.final("setup_error")
        if setup_error:
            raise EnvironmentBroken(f"a setup step failed: {setup_error}")
        grade: Grade | None = None
        crash = rec.sandbox_failure()  # the driver raised for one the agent did not cause
        if crash is None:
            try:
                grade = await self.benchmark.grade(env, task, rec, self.ctx)
            except EnvironmentBroken as e:
                write_outputs(self.run_dir, task.id, sample, rec, e.grade, None, self.benchmark)
                raise
        else:  # the agent's failure: its sandbox is gone, nothing to grade
            rec.error = f"the agent's actions made its sandbox fail: {crash.why}" + (
                f" ({rec.error})" if rec.error else ""
            )
        # Calls the model attempted: the ones that ran plus the ones the parser could not read.
        calls = sum(len(i.get("tool_calls") or []) + len(i.get("parse_errors") or []) for i in rec.infos)
        failed = sum(int(i.get("n_tool_errors") or 0) for i in rec.infos)
        details: dict[str, Any] = {
            "reward": sum(rec.rewards),
            "terminated": rec.terminated,
            "truncated": rec.truncated,
            "truncated_by": rec.final("truncated_by"),
            "verifier": rec.final("verifier"),
            "answer": rec.final("answer"),
            "format_errors": sum(bool(i.get("format_error")) for i in rec.infos),
            **rec.extra,
            **(grade_details(grade, self.benchmark.unresolved_kinds) if grade is not None else {}),
        }
        result = InstanceResult(
            instance_id=task.id,
            sample=sample,
            status="agent_crash" if crash else "done",
            success=grade.success if grade is not None else False,
            score=grade.score if grade is not None else 0.0,
            grade=grade.label if grade is not None else self.benchmark.ungraded_label(task),
            turns=rec.turns,
            prompt_tokens=rec.prompt_tokens,
            response_tokens=rec.response_tokens,
            tokens_exact=rec.tokens_exact,
            tool_calls=calls,
            tool_errors=failed,
            wall_s=time.perf_counter() - start,
            error=rec.error,
            details=details,
        )
        return result, rec, grade

    async def run_item(self, worker: dict[str, gymnasium.Env], task: Task, sample: int) -> InstanceResult:
        """All attempts of one (task, sample); never raises (but for cancellation)."""
        start = time.perf_counter()
        for attempt in range(1, self.cfg.retries + 2):
            try:
                async with asyncio.timeout(self.cfg.instance_timeout_s):
                    result, rec, grade = await self.attempt(worker["env"], task, sample)
                result.attempts = attempt
                write_outputs(self.run_dir, task.id, sample, rec, grade, result.error, self.benchmark)
                return result
            except InfraError as e:
                await self._replace_env(worker)
                if e.permanent or attempt > self.cfg.retries:
                    return self._failed(task, sample, "infra_error", str(e), attempt, start)
                log.warning(
                    "%s#%d: infrastructure failure, retrying (%d/%d): %s",
                    task.id,
                    sample,
                    attempt,
                    self.cfg.retries,
                    e,
                )
            except EnvironmentBroken as e:
                await self._replace_env(worker)
                return self._failed(task, sample, "env_error", str(e), attempt, start, keep_outputs=True)
            except TimeoutError:
                await self._replace_env(worker)
                why = f"the attempt took longer than instance_timeout_s={self.cfg.instance_timeout_s:g}"
                return self._failed(task, sample, "timeout", why, attempt, start)
            except Exception as e:  # a bug in an env, a grader or a policy factory: this instance only
                await self._replace_env(worker)
                if getattr(e, "environment_broken", False):  # e.g. a desktop setup step that failed
                    why = f"the task's environment is broken: {type(e).__name__}: {e}"
                    return self._failed(task, sample, "env_error", why, attempt, start)
                log.exception("%s#%d failed", task.id, sample)
                why = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"
                return self._failed(task, sample, "error", why, attempt, start)
        raise AssertionError("unreachable")

    def _failed(
        self,
        task: Task,
        sample: int,
        status: str,
        why: str,
        attempts: int,
        start: float,
        keep_outputs: bool = False,
    ) -> InstanceResult:
        if keep_outputs:  # the attempt's transcript and grade are there already: add why it failed
            out = instance_dir(self.run_dir, task.id, sample)
            out.mkdir(parents=True, exist_ok=True)
            (out / "error.txt").write_text(why + "\n", encoding="utf-8")
        else:
            write_outputs(self.run_dir, task.id, sample, None, error=why)
        return InstanceResult(
            instance_id=task.id,
            sample=sample,
            status=status,
            grade=self.benchmark.ungraded_label(task) if status != "env_error" else "",
            wall_s=time.perf_counter() - start,
            attempts=attempts,
            error=why[:4000],
        )

    async def _replace_env(self, worker: dict[str, gymnasium.Env]) -> None:
        try:
            await aclose(worker["env"])
        except Exception as e:  # the env is being thrown away anyway
            log.debug("closing a failed env: %s", e)
        worker["env"] = self.make_env()

    # ---- the run ---------------------------------------------------------------------------
    async def run(self, store: ResultStore) -> tuple[int, int]:
        """Run what is not finished yet; returns (skipped, ran)."""
        cfg = self.cfg
        tasks = select_tasks(self.suite, cfg)
        if self.predictions is not None:
            tasks = self.predictions.select(tasks)
        finished = store.finished()
        work = [(t, s) for t in tasks for s in range(cfg.samples) if (t.id, s) not in finished]
        skipped = len(tasks) * cfg.samples - len(work)
        self.console.print(
            f"[bold]{cfg.suite}[/bold] · agent [bold]{cfg.agent}[/bold] · {len(tasks)} tasks × {cfg.samples} "
            f"sample(s) → {self.run_dir}"
            + (f" · resuming: {skipped} finished, {len(work)} to go" if skipped else "")
        )
        if not work:
            return skipped, 0
        work = await self._prepared(work)
        self.driver = self.predictions or make_driver(cfg.agent, self.suite, cfg.model, self.max_turns)
        tally: Counter[str | None] = Counter()
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[tally]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=self.console, transient=False) as progress:
            bar = progress.add_task(f"{cfg.suite} · {cfg.agent}", total=len(work), tally="resolved 0")

            async def run(slot: dict[str, gymnasium.Env], _: int, item: tuple[Task, int]) -> None:
                result = await self.run_item(slot, *item)
                store.put(result)
                tally[unresolved_kind(result)] += 1
                progress.update(bar, advance=1, tally=_tally(tally, self.kinds))

            slots: list[dict[str, gymnasium.Env]] = []  # an env each; run_item replaces a broken one
            try:
                slots += [{"env": self.make_env()} for _ in range(min(cfg.concurrency, len(work)))]
                await on_envs(slots, work, run)
            finally:
                for slot in slots:
                    await aclose(slot["env"])
                await self.driver.close()
        return skipped, len(work)

    async def _prepared(self, work: list[tuple[Task, int]]) -> list[tuple[Task, int]]:
        """The work on tasks the benchmark has prepared (SWE-bench: on instance images)."""
        unique = list({t.id: t for t, _ in work}.values())
        with self.console.status(f"preparing {len(unique)} instance(s) ({self.benchmark.name})..."):
            ready = await self.benchmark.prepare(unique, self.ctx)
        by_id = {t.id: t for t in ready}
        return [(by_id[t.id], s) for t, s in work]


def _tally(counts: Counter[str | None], labels: Mapping[str, tuple[str, str]]) -> str:
    """The progress bar's "resolved 2 · 1 failed, 1 environment error" (None: resolved)."""
    unresolved = count_phrase({k: n for k, n in counts.items() if k is not None}, labels)
    return f"resolved {counts[None]}" + (f" · {unresolved}" if unresolved else "")


async def close_loop_resources() -> None:
    """Close what envs keep per event loop beyond one env's life, before the pool closes.

    The web env keeps warm browser stacks (and Playwright) per loop for the next env; on the
    env event loop they close at exit, but this run's loop ends with `asyncio.run`, so
    they are closed here (only if that env was used: nothing is imported for it).
    """
    web = sys.modules.get("arborl.envs.web")
    if web is not None and hasattr(web, "close_stack_pools"):
        try:
            await web.close_stack_pools()
        except Exception as e:  # cleanup at the end of a run: report, do not mask the results
            log.warning("closing web stacks failed: %s", e)


async def run_eval(
    cfg: EvalConfig,
    sandbox: Mapping[str, Any] | None = None,
    pool: PoolConfig | None = None,
    console: Console | None = None,
) -> EvalOutcome:
    """Run (or resume) an evaluation; writes the run directory and returns its summary."""
    console = console or Console()
    suite = resolve_suite(cfg)  # an unknown suite fails here, before a run directory is made for it
    run_dir = cfg.run_dir()
    store = ResultStore(run_dir / "results.sqlite", run_id=run_dir.name)
    try:
        if store.open_run(cfg.suite, cfg.agent, cfg.model_dump()) and not cfg.run.resume:
            store.db.execute("DELETE FROM results WHERE run_id = ?", (store.run_id,))
        pool = pool or PoolConfig(max_size=max(4, cfg.concurrency))
        if pool.max_size < cfg.concurrency:  # a worker holds one sandbox at a time (episode, then grading)
            pool = pool.model_copy(update={"max_size": cfg.concurrency})
        async with make_pool(sandbox, pool) as sandbox_pool:
            try:
                run = EvalRun(cfg, sandbox_pool, console, suite)
                skipped, ran = await run.run(store)
            finally:
                await close_loop_resources()
        results = store.results()
        summary = summarize(results, cfg.pass_k, run.benchmark.unresolved_kinds)
        summary.update({"suite": cfg.suite, "agent": cfg.agent, "run_id": store.run_id})
        summary["success_rule"] = run.benchmark.success_rule(run.suite)
        # the benchmark's own report tables, kept so that the report needs no hook to draw them
        tables = run.benchmark.report_tables([r for r in results if r.status in FINAL])
        summary["report_tables"] = [t.as_dict() for t in tables]
        if run.predictions is not None:  # the benchmark's own summary (bfcl-eval's accuracy lines)
            own = run.predictions.report(console, results, run_dir)
            if own is not None:
                summary[run.benchmark.name] = own
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    finally:
        store.close()
    report = None
    if cfg.report:
        from .report import write_report

        report = write_report([run_dir])[0]
    return EvalOutcome(run_dir, summary, skipped, ran, report)
