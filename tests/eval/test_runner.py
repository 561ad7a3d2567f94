"""The runner in-process: isolation (one crash never affects another instance), per-instance
timeouts, retries of real sandbox failures (never of agent failures), resume."""

from __future__ import annotations

import asyncio
import json
import os

import docker
import gymnasium
import pytest
from rich.console import Console

import arborl.envs  # noqa: F401
from arborl.eval.config import EvalConfig
from arborl.eval.result_store import read_results
from arborl.eval.runner import run_eval
from arborl.sandboxes.owner import OWNER_PID
from arborl.tasks import Suite, get_suite, register_suite
from arborl.tasks.toy import tool_mini as tm

QUIET = Console(quiet=True)
ATTEMPTS: dict[str, int] = {}


def mixed_policy(task):
    """tool-mini gold, except for tasks chosen to fail in different ways."""
    if task.id.endswith("arith-001"):
        raise RuntimeError("the policy factory is broken for this task")
    if task.id.endswith("arith-002"):

        def crash(messages, info):
            raise ValueError("the policy crashed")

        return crash
    if task.id.endswith("arith-003"):

        async def hang(messages, info):
            await asyncio.sleep(60)

        return hang
    return tm.gold_policy(task)


register_suite(
    Suite(
        "test-eval-mixed", "arborl/Tool-v0", lambda: get_suite("tool-mini").tasks()[:12], gold=mixed_policy
    ),
    force=True,
)


def cfg(tmp_path, suite, **kw):
    return EvalConfig(suite=suite, run={"dir": str(tmp_path / "run")}, report=False, **kw)


async def test_one_failing_instance_never_affects_the_others(tmp_path):
    outcome = await run_eval(
        cfg(tmp_path, "test-eval-mixed", concurrency=3, instance_timeout_s=3, retries=2), console=QUIET
    )
    _, results = read_results(outcome.run_dir)
    by_id = {r.instance_id.split("/")[1]: r for r in results}
    assert len(results) == 12
    broken, crashed, hung = by_id.pop("arith-001"), by_id.pop("arith-002"), by_id.pop("arith-003")
    assert broken.status == "error" and "factory is broken" in broken.error and broken.attempts == 1
    # a scripted (gold/empty) policy is the harness's own: its crash is an infrastructure
    # error, retried, and then counted as an error, never a miss
    assert (
        crashed.status == "infra_error"
        and not crashed.success
        and "scripted gold policy failed" in crashed.error
    )
    assert crashed.attempts == 3 and "the policy crashed" in crashed.error
    assert hung.status == "timeout" and hung.attempts == 1 and 2.5 < hung.wall_s < 30
    assert all(r.success and r.status == "done" for r in by_id.values())
    assert outcome.summary["resolved"] == 9 and outcome.summary["errors"] == 2
    assert outcome.summary["infra_errors"] == 1 and "1 infrastructure error" in outcome.summary["headline"]
    assert (outcome.run_dir / "instances" / "tool-mini__arith-001" / "sample-0" / "error.txt").exists()


async def test_an_interrupted_run_resumes_where_it_stopped(tmp_path):
    first = await run_eval(cfg(tmp_path, "tool-mini", limit=5), console=QUIET)
    assert (first.skipped, first.ran) == (0, 5)
    second = await run_eval(cfg(tmp_path, "tool-mini", limit=12, samples=2, pass_k=[1, 2]), console=QUIET)
    assert (second.skipped, second.ran) == (5, 19)
    _, results = read_results(second.run_dir)
    assert len(results) == 24 and len({(r.instance_id, r.sample) for r in results}) == 24
    assert second.summary["pass_at_k"] == {1: 1.0, 2: 1.0}
    with pytest.raises(ValueError, match=r"pick another run\.dir"):
        await run_eval(cfg(tmp_path, "tool-mini", agent="empty"), console=QUIET)


def _kill_my_sandboxes(task) -> int:
    """Remove this process's containers of the task's sandbox spec: a real sandbox failure."""
    key = gymnasium.make("arborl/Code-v0").unwrapped.sandbox_spec(task).key()
    client = docker.from_env()
    labels = [f"arborl.spec={key}", f"{OWNER_PID}={os.getpid()}"]
    containers = client.containers.list(filters={"label": labels})
    for c in containers:
        c.remove(force=True)
    return len(containers)


def flaky_gold(task):
    """swe-mini gold, but the first attempt's sandbox is destroyed before the patch is applied."""
    gold = get_suite("swe-mini").gold_policy(task)
    ATTEMPTS[task.id] = ATTEMPTS.get(task.id, 0) + 1
    first = ATTEMPTS[task.id] == 1 or task.id.endswith("-2")  # task -2: every attempt fails

    def policy(messages, info):
        if first and len(messages) == 2:
            assert _kill_my_sandboxes(task) >= 1
        return gold(messages, info)

    return policy


register_suite(
    Suite("test-eval-flaky", "arborl/Code-v0", lambda: get_suite("swe-mini").tasks()[:2], gold=flaky_gold),
    force=True,
)


@pytest.mark.docker
async def test_sandbox_failures_are_retried_and_reported(tmp_path, docker_backend):
    ATTEMPTS.clear()
    config = cfg(tmp_path, "test-eval-flaky", concurrency=1, retries=1, swe={"images": "off"})
    outcome = await run_eval(config, sandbox={"type": "docker"}, console=QUIET)
    _, results = read_results(outcome.run_dir)
    first, second = results
    assert first.status == "done" and first.success and first.grade == "FULL" and first.attempts == 2
    assert second.status == "infra_error" and second.attempts == 2 and "sandbox" in second.error.lower()
    assert {first.instance_id: 2, second.instance_id: 2} == ATTEMPTS
    grade = json.loads(
        (outcome.run_dir / "instances" / first.instance_id / "sample-0" / "grade.json").read_text()
    )
    assert grade["status"] == "FULL"
    # infra errors are not results: the next run tries that instance again (and it fails again)
    again = await run_eval(config, sandbox={"type": "docker"}, console=QUIET)
    assert (again.skipped, again.ran) == (1, 1) and ATTEMPTS[second.instance_id] == 4
