"""The headlines a user reads (console, progress bar, summary.json, report.md / report.html):
rates over every sample, errors counted as unresolved and broken out by kind; a crash the
agent caused is a failure, never retried; a patch that does not apply shows its first
failing hunk."""

from __future__ import annotations

import asyncio
import difflib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from arborl.envs import register_env
from arborl.envs.base import Step, TextEnv
from arborl.eval.config import EvalConfig
from arborl.eval.result_store import read_results
from arborl.eval.runner import run_eval
from arborl.sandboxes import SandboxCrashed
from arborl.tasks import Suite, get_suite, register_suite
from arborl.tasks.swebench import mini as swe_mini
from arborl.tasks.swebench.mini import INSTANCES, REPOS

CMD = [sys.executable, "-m", "arborl.cli.main"]
TASKS = get_suite("tool-mini").tasks()[:4]
SOLVED, AGENT_CRASH, INFRA_CRASH, FLAKY = (t.id for t in TASKS)
STEPS: dict[str, int] = {}


class Fragile(TextEnv):
    """One step an episode. The sandbox dies on some tasks, and the env's step info says who
    made it die (`sandbox_fault`, the contract with the sandbox side): the agent (it filled
    memory), the infrastructure, or nobody says (an env from before the key: a real
    `SandboxCrashed` that the base env reports), the last on the first attempt only."""

    async def on_reset(self, task):
        return str(task.question)

    async def on_step(self, action):
        tid = self.task_id
        STEPS[tid] = STEPS.get(tid, 0) + 1
        if tid == AGENT_CRASH:
            return self._died("SandboxCrashed: out of memory (dd if=/dev/zero of=/workspace/fill)", "agent")
        if tid == INFRA_CRASH:
            return self._died("SandboxCrashed: the Docker daemon restarted", "infra")
        if tid == FLAKY and STEPS[tid] == 1:
            raise SandboxCrashed("c0ffee", "the container exited")
        return Step("right", reward=1.0, terminated=True)

    @staticmethod
    def _died(why: str, fault: str) -> Step:
        info = {"sandbox_error": why, "sandbox_fault": fault}
        return Step("Error: the sandbox failed. The episode has ended.", truncated=True, info=info)


register_env("test/Fragile-v0", Fragile, force=True)
register_suite(
    Suite("test-fragile", "test/Fragile-v0", lambda: TASKS, gold=lambda task: lambda messages, info: "42"),
    force=True,
)


def test_a_crash_the_agent_caused_is_a_failure_and_is_never_retried(tmp_path):
    """Issue 31: 1 solved plus 1 that crashed its sandbox is not 100 %. The agent's crash is a
    result (never retried, on resume neither); the infrastructure's is retried, and when the
    retries run out it is still an unresolved sample, broken out as infrastructure."""
    STEPS.clear()
    console = Console(record=True, width=200)
    cfg = EvalConfig(
        suite="test-fragile", agent="gold", retries=2, concurrency=1, run={"dir": str(tmp_path / "r")}
    )
    outcome = asyncio.run(run_eval(cfg, console=console))
    _, results = read_results(outcome.run_dir)
    by_id = {r.instance_id: r for r in results}
    crash = by_id[AGENT_CRASH]
    assert (crash.status, crash.success, crash.score, crash.attempts) == ("agent_crash", False, 0.0, 1)
    assert "out of memory" in crash.error and crash.turns == 1
    assert (by_id[INFRA_CRASH].status, by_id[INFRA_CRASH].attempts) == ("infra_error", 3)
    assert (by_id[FLAKY].status, by_id[FLAKY].success, by_id[FLAKY].attempts) == ("done", True, 2)
    assert STEPS == {SOLVED: 1, AGENT_CRASH: 1, INFRA_CRASH: 3, FLAKY: 2}
    s = outcome.summary
    headline = "resolved 2/4 (50.0%) · unresolved 2: 1 agent crash, 1 infrastructure error"
    assert s["headline"] == headline and s["resolved_rate"] == 0.5 and s["pass_at_k"] == {1: 0.5}
    assert s["agent_crashes"] == 1 and s["infra_errors"] == 1 and s["samples"] == 4
    saved = json.loads((outcome.run_dir / "summary.json").read_text())
    assert saved["headline"] == headline and saved["unresolved_by_kind"]["agent_crash"] == 1
    transcript = outcome.run_dir / "instances" / "tool-mini__lookup-000" / "sample-0" / "transcript.json"
    assert "sandbox failed" in transcript.read_text()  # what the agent did is kept
    assert "resolved 2 · 1 agent crash, 1 infrastructure error" in console.export_text()  # progress bar
    md = (outcome.run_dir / "report.md").read_text()
    assert "| 4 | 4 | 2/4 (50.0%) |" in md and "| 2: 1 agent crash, 1 infrastructure error |" in md
    assert "| agent_crash | 0 | no | 1 | " in md  # the instance row: status, score, success, turns
    shown = subprocess.run([*CMD, "eval-report", str(outcome.run_dir)], capture_output=True, text=True)
    assert f"r: {headline}" in shown.stdout, shown.stdout + shown.stderr  # eval-report: each run's headline
    again = asyncio.run(run_eval(cfg, console=Console(quiet=True)))
    assert (again.skipped, again.ran) == (3, 1) and STEPS[AGENT_CRASH] == 1 and STEPS[INFRA_CRASH] == 6


def arborl(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def instances(*ids: str) -> list[dict]:
    rows = [json.loads(line) for line in INSTANCES.read_text().splitlines()]
    return [r for r in rows if r["instance_id"] in ids]


@pytest.mark.docker
def test_an_environment_error_counts_in_the_headline_as_unresolved(docker_backend, tmp_path):
    """Issue 37 point 2: gold on three instances, one of whose environments is broken (its
    test command fails: the gold patch cannot resolve it), is 2 of 3, not 2 of 2."""
    rows = instances("arborl-mini__strkit-1", "arborl-mini__strkit-2", "arborl-mini__statkit-1")
    (tmp_path / "three.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    broken = [{"repo": "arborl-mini/statkit", "test_cmd": "python3 -m pytest -rA --no-such-flag"}]
    (tmp_path / "envs.json").write_text(json.dumps(broken))
    res = arborl(
        "eval",
        "suite=three.jsonl",
        f"swe.repos_dir=[{REPOS}]",
        "swe.environments=envs.json",
        "swe.images=off",
        "sandbox=docker",
        "agent=gold",
        "run.dir=run",
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    out = " ".join(res.stdout.split())  # rich may wrap; compare the words
    assert "resolved 2/3 (66.7%) · unresolved 1: 1 environment error" in out, res.stdout
    s = json.loads((tmp_path / "run/summary.json").read_text())
    assert (s["resolved"], s["samples"], s["env_errors"]) == (2, 3, 1)
    assert s["resolved_rate"] == pytest.approx(2 / 3) and s["pass_at_k"] == {"1": pytest.approx(2 / 3)}
    md = (tmp_path / "run/report.md").read_text()
    assert "| 3 | 3 | 2/3 (66.7%) | @1: 66.7% |" in md and "| 1: 1 environment error |" in md
    assert "| env_error | " in md and "gold patch does not resolve" in md
    page = (tmp_path / "run/report.html").read_text()
    assert "2/3 (66.7%)" in page and "1: 1 environment error" in page


def two_hunk_patch(instance_id: str, path: str) -> tuple[str, str]:
    """A patch of two hunks far apart in `path` whose second cannot apply (a removed line that
    is not in the file); returns (patch, the second hunk's header as difflib wrote it)."""
    inst = instances(instance_id)[0]
    text = swe_mini.files_at(swe_mini.clone_of(swe_mini.bundle_for(inst["repo"])), inst["base_commit"])[path]
    lines = text.splitlines(True)
    edited = ["# the first hunk applies\n", *lines, "# the second does not\n"]
    diff = list(difflib.unified_diff(lines, edited, f"a/{path}", f"b/{path}", n=1))
    headers = [i for i, line in enumerate(diff) if line.startswith("@@")]
    assert len(headers) == 2, diff
    first = headers[1] + 1  # the second hunk's first context line: now it removes a line the
    diff[first : first + 1] = ["-no such line in the file\n", "+" + diff[first][1:]]  # file lacks
    return f"diff --git a/{path} b/{path}\n" + "".join(diff), diff[headers[1]].strip()


@pytest.mark.docker
def test_a_patch_that_does_not_apply_shows_its_first_failing_hunk(docker_backend, tmp_path):
    """Issue 37 point 4: the console and the report's error column say which hunk failed."""
    broken, header = two_hunk_patch("arborl-mini__strkit-2", "strkit/text.py")
    gold = instances("arborl-mini__strkit-1")[0]
    preds = [
        {"instance_id": "arborl-mini__strkit-1", "model_patch": gold["patch"]},
        {"instance_id": "arborl-mini__strkit-2", "model_patch": broken},
    ]
    (tmp_path / "preds.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    res = arborl(
        "eval",
        "suite=swe-mini",
        "predictions=preds.jsonl",
        "swe.images=off",
        "sandbox=docker",
        "run.dir=run",
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    line = int(header.split()[1].lstrip("-").split(",")[0])  # the hunk's old start, git's "patch failed: f:N"
    where = f"strkit/text.py:{line} {header}"
    assert "resolved 1/2 (50.0%) · unresolved 1: 1 patch-apply failure" in " ".join(res.stdout.split())
    assert "grades: FULL 1, NO 1 (patch_apply_failed 1)" in res.stdout
    assert f"arborl-mini__strkit-2#0: patch did not apply: {where}" in res.stdout, res.stdout
    assert "-no such line in the file" in res.stdout  # the hunk itself, under it
    md = (tmp_path / "run/report.md").read_text()
    assert f"| patch did not apply: {where} |" in md
    page = (tmp_path / "run/report.html").read_text()
    assert "-no such line in the file" in page
    s = json.loads((tmp_path / "run/summary.json").read_text())
    assert s["unresolved_by_kind"]["patch_apply"] == 1 and s["grade_errors"] == {"patch_apply_failed": 1}
    assert {
        "title": "SWE-bench grades",
        "columns": ["FULL", "PARTIAL", "NO", "patch apply failed"],
        "row": [1, 0, 1, 1],
    } in s["report_tables"]
    assert "| run | FULL | PARTIAL | NO | patch apply failed |" in md
