"""arborl.eval: run task suites with an agent, grade, store (resumable), report.

    from arborl.eval import EvalConfig, run_eval
    outcome = await run_eval(EvalConfig(suite="swe-mini", agent="gold"), sandbox={"type": "docker"})
    outcome.summary["resolved_rate"], outcome.run_dir

- `runner`   the run: concurrency over one sandbox pool, timeouts, retries of infrastructure
             failures, isolation; `drivers` (scripted policies, the model agent). How a suite's
             tasks are prepared and graded, and which stored outputs (`predictions=`) it can
             grade instead of running an agent, is its benchmark's hook, which eval asks the
             registry for (`arborl.envs.benchmarks`): eval names no benchmark. The env-graded
             default scores the total reward against the suite's success rule (`Suite.success`)
- `summary`  resolved rate over every sample (errors unresolved, broken out by kind), pass@k
             (Chen et al. 2021), turns, tokens, tool errors, wall time
- `store`    SQLite results keyed by (run, instance, sample); `outputs` per-instance files
- `report`   Markdown + HTML with matplotlib plots, one run or several compared

The command line is `arborl eval` / `arborl eval-report` (docs/eval.md).
"""

from .config import EvalConfig
from .report import write_report
from .result_store import InstanceResult, ResultStore, read_results
from .runner import EvalOutcome, run_eval
from .summary import pass_at_k, summarize

__all__ = [
    "EvalConfig",
    "EvalOutcome",
    "InstanceResult",
    "ResultStore",
    "pass_at_k",
    "read_results",
    "run_eval",
    "summarize",
    "write_report",
]
