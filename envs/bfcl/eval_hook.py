"""Re-score bfcl-eval result files, no agent run (`arborl.tasks.bfcl.result_files`): the BFCL
hook of `arborl eval` (`BfclBenchmark`, `arborl.envs.benchmarks`).

    arborl eval suite=bfcl-simple predictions=result/my-model/non_live/BFCL_v4_simple_python_result.json
    arborl eval suite=bfcl-multi-turn predictions=result/my-model      # every result file under it

The suite's entries of each category the files hold are scored (`tasks=` / `limit=` narrow
them as usual); an entry without a usable result counts as wrong. Each entry's "episode" is
its stored result: per-instance outputs as for any run (`transcript.json`: the questions and
the stored replies; `infos.json`: the verdict with bfcl-eval's error kind and message, what
was decoded, the file and line). At the end, the accuracy of each category as bfcl-eval's
runner prints it, the overall accuracy (one category: its own; a suite of several: their
unweighted mean, a category without results counting 0, as bfcl-eval's summary columns such
as "Multi Turn Overall Acc" compute it), every
line that was not scored as it stands, and bfcl-eval's score files under `<run>/score/`
(`BFCL_v4_<category>_score.json`: a header line, then each entry that is not valid).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import gymnasium
from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console

from arborl.tasks import Task
from arborl.tasks.bfcl.data import BfclTask
from arborl.tasks.bfcl.result_files import MISSING, UNUSABLE, ResultFiles, read_result_files

from ..benchmarks import Benchmark, EpisodeRecord, GradeContext, PredictionSource

#: Problems printed; the rest are in `<run>/result_file_problems.txt`.
MAX_PROBLEMS_SHOWN = 10

__all__ = ["BfclBenchmark", "BfclOptions", "BfclResults", "BfclResultsDriver"]


class BfclOptions(BaseModel):
    """How bfcl-eval result files given as `predictions` are read (arborl.tasks.bfcl.result_files): eval's `bfcl` section."""

    model_config = ConfigDict(extra="forbid")

    decoder: Literal["auto", "fc", "prompting", "hermes"] = Field(
        "auto",
        description="the form the model's handler stored replies in: fc (lists of calls, function-"
        "calling APIs), prompting (Python call-list text), hermes (<tool_call> text); auto: "
        "from the results (arborl.tasks.bfcl.decoding)",
    )
    underscore_to_dot: bool | None = Field(
        None,
        description="whether the model saw dotted function names with '_' for '.' (bfcl-eval's "
        "model table says so per model); None: detected from the calls",
    )


class BfclBenchmark(Benchmark):
    """BFCL: episodes graded by their env (bfcl-eval's checkers); `predictions=` re-scores
    bfcl-eval's result files (`eval.bfcl` section: how they are decoded)."""

    name = "bfcl"
    options: ClassVar[tuple[str, type[BaseModel]] | None] = ("bfcl", BfclOptions)

    def predictions(self, path: str, tasks: list[Task], ctx: GradeContext) -> PredictionSource:
        return BfclResults(path, tasks, ctx.suite.name, ctx.options or BfclOptions())


class BfclResults:
    """The result files of one run, the driver that scores them, and the report."""

    def __init__(self, path: str, tasks: Sequence[Task], suite: str, options: Any) -> None:
        """`options`: how to decode the files (`decoder`, `underscore_to_dot`: eval's `bfcl`)."""
        bfcl_tasks = [t for t in tasks if isinstance(t, BfclTask)]
        self.categories = sorted({t.category for t in bfcl_tasks})  # the suite's
        self.files: ResultFiles = read_result_files(
            path, bfcl_tasks, suite, options.decoder, options.underscore_to_dot
        )

    def select(self, tasks: list[Task]) -> list[Task]:
        """The tasks of the categories the files hold."""
        return [t for t in tasks if isinstance(t, BfclTask) and t.category in self.files.categories]

    async def run(self, env: gymnasium.Env, task: Task, sample: int, max_turns: int) -> EpisodeRecord:
        return await BfclResultsDriver(self.files).run(env, task, sample, max_turns)

    async def close(self) -> None:
        return None

    def report(self, console: Console, results: Sequence[Any], run_dir: Path) -> dict[str, Any]:
        """Print per-category and overall accuracy as bfcl-eval does, the problems; write the
        score files. Returns the numbers (also in `<run>/bfcl_scores.json`)."""
        console.print(f"bfcl-eval results: {', '.join(map(str, self.files.paths))} · {self.files.how}")
        by_category: dict[str, list[Any]] = {}
        for r in sorted(results, key=lambda r: r.instance_id):
            by_category.setdefault(str(r.details.get("bfcl_category", "")), []).append(r)
        scores: dict[str, Any] = {}
        for category, rows in sorted(by_category.items()):
            correct = sum(r.success for r in rows)
            kinds = [_verdict(r).get("error_type") for r in rows]
            scores[category] = {
                "accuracy": correct / len(rows),
                "correct_count": correct,
                "total_count": len(rows),
                "missing_count": kinds.count(MISSING),
                "unusable_count": kinds.count(UNUSABLE),
            }
            # bfcl-eval's runner prints these two lines per category (evaluate_task)
            console.print(f"🔍 Running test: {category}", markup=False, highlight=False, emoji=False)
            console.print(
                f"✅ Test completed: {category}. 🎯 Accuracy: {correct / len(rows):.2%}",
                markup=False,
                highlight=False,
                emoji=False,
            )
            _write_score_file(run_dir, category, scores[category], rows)
        overall = _overall(scores, self.categories)
        absent = [c for c in self.categories if c not in scores]
        how = (
            f"the unweighted mean of the suite's {len(self.categories)} categories, as bfcl-eval's "
            "summaries average them"
            + (f", {', '.join(absent)} (no results) counted 0 as there" if absent else "")
            + "; "
            if len(self.categories) > 1
            else ""
        )
        console.print(
            f"Overall Acc: {overall['accuracy']:.2%} ({how}{overall['correct_count']} of "
            f"{overall['total_count']} entries scored valid)",
            markup=False,
            highlight=False,
        )
        self._print_problems(console, scores, run_dir)
        summary = {"categories": scores, "overall": overall, "how": self.files.how}
        (run_dir / "bfcl_scores.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
        return summary

    def _print_problems(self, console: Console, scores: dict[str, Any], run_dir: Path) -> None:
        missing = sum(s["missing_count"] for s in scores.values())
        unusable = sum(s["unusable_count"] for s in scores.values())
        if missing or unusable:
            present = {c: s["total_count"] - s["missing_count"] for c, s in scores.items()}
            partial = ", ".join(
                f"{c} {(s['correct_count'] / present[c]) if present[c] else 0:.2%}" for c, s in scores.items()
            )
            console.print(
                f"[yellow]{missing} entries have no result and {unusable} an unusable one: counted wrong. "
                f"bfcl-eval refuses such files unless run with --partial-eval, which scores only the "
                f"entries present: {partial}[/yellow]"
            )
        problems = self.files.problems
        if not problems:
            return
        path = run_dir / "result_file_problems.txt"
        path.write_text("".join(p + "\n" for p in problems), encoding="utf-8")
        console.print(f"[yellow]{len(problems)} line(s) not scored as they stand ({path}):[/yellow]")
        for problem in problems[:MAX_PROBLEMS_SHOWN]:
            console.print(f"  {problem}", markup=False, highlight=False)
        if len(problems) > MAX_PROBLEMS_SHOWN:
            console.print(f"  ... and {len(problems) - MAX_PROBLEMS_SHOWN} more")


def _verdict(result: Any) -> dict[str, Any]:
    verifier = result.details.get("verifier")
    return verifier if isinstance(verifier, dict) else {}


def _overall(scores: dict[str, Any], categories: list[str]) -> dict[str, Any]:
    """bfcl-eval's summary of several categories: the unweighted mean of their accuracies, a
    category without results counting 0 (`calculate_unweighted_accuracy`)."""
    correct = sum(s["correct_count"] for s in scores.values())
    total = sum(s["total_count"] for s in scores.values())
    categories = sorted(set(categories) | set(scores))
    mean = sum(scores[c]["accuracy"] if c in scores else 0.0 for c in categories) / max(1, len(categories))
    return {"accuracy": mean, "correct_count": correct, "total_count": total, "categories": categories}


def _write_score_file(run_dir: Path, category: str, header: dict[str, Any], rows: list[Any]) -> None:
    """bfcl-eval's score file: a header line, then one line per entry that is not valid."""
    out = run_dir / "score"
    out.mkdir(parents=True, exist_ok=True)
    lines = [header]
    for r in rows:
        if r.success:
            continue
        verdict = _verdict(r)
        lines.append(
            {
                "id": r.instance_id,
                "test_category": category,
                "valid": False,
                "error": verdict.get("error", r.error),
                "error_type": verdict.get("error_type", r.status),
                "model_result_decoded": verdict.get("decoded"),
                "source": verdict.get("source"),
            }
        )
    text = "".join(json.dumps(line, ensure_ascii=False, default=str) + "\n" for line in lines)
    (out / f"BFCL_v4_{category}_score.json").write_text(text, encoding="utf-8")


class BfclResultsDriver:
    """Plays no episode: an entry's episode is its stored result, scored by bfcl-eval's checkers."""

    def __init__(self, files: ResultFiles) -> None:
        self.files = files

    async def run(self, env: gymnasium.Env, task: Task, sample: int, max_turns: int) -> EpisodeRecord:
        assert isinstance(task, BfclTask)
        scored, entry = self.files.score(task)
        verdict = scored.verdict
        info = {
            "bfcl_valid": verdict.valid,
            "verifier": {
                "valid": verdict.valid,
                "error_type": verdict.error_type,
                "error": verdict.error,
                "decoded": scored.decoded,
                "source": entry.where if entry else None,
            },
        }
        return EpisodeRecord(
            messages=_transcript(task, entry.result if entry else None),
            infos=[info],
            rewards=[verdict.reward],
            terminated=True,
            error=None if entry else "; ".join(map(str, verdict.error)),
            extra={"bfcl_category": task.category},
        )

    async def close(self) -> None:
        return None


def _text(reply: Any) -> str:
    return reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)


def _transcript(task: BfclTask, result: Any) -> list[dict[str, Any]]:
    """The questions and the stored replies (multi-turn: each turn's, step by step)."""
    questions = [list(turn) if isinstance(turn, list) else [] for turn in task.turns]
    if result is None:
        return [m for turn in questions for m in turn]
    if task.scoring != "multi_turn" or not isinstance(result, list):
        return [*(questions[0] if questions else []), {"role": "assistant", "content": _text(result)}]
    messages: list[dict[str, Any]] = []
    for i, steps in enumerate(result):
        messages += questions[i] if i < len(questions) else []
        for step in steps if isinstance(steps, list) else [steps]:
            messages.append({"role": "assistant", "content": _text(step)})
    return messages
