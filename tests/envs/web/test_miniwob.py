"""arborl/MiniWoB-v0 and the `web-miniwob` suites: real MiniWoB++ pages from the installed
package, in the web env's Chromium, scored by the pages' own JavaScript."""

from __future__ import annotations

import subprocess
import sys

import gymnasium
import pytest

from arborl.envs import TaskError
from arborl.envs.episodes import run_episodes_sync
from arborl.tasks import get_suite
from arborl.tasks.web import miniwob as mw

pytest.importorskip("miniwob", reason="MiniWoB++ is in the `ecosystem` extra")
SUITE = get_suite("web-miniwob")
#: A handful of tasks, each a different kind of widget (buttons, text boxes, a list, checkboxes).
SOLVED = ("click-test", "click-button", "enter-text", "login-user", "choose-list", "click-checkboxes")


def test_suites_list_real_package_tasks():
    names = set(mw.task_names())
    assert len(names) >= 120
    assert set(mw.NEEDS_POINTER) <= names and set(mw.SOLUTIONS) <= names
    tasks = SUITE.tasks()
    assert {t.name for t in tasks} == set(mw.SOLUTIONS) and len(tasks) == 2 * len(mw.SOLUTIONS)
    everything = get_suite("web-miniwob-all").tasks()
    assert len(everything) == len(names) - len(mw.NEEDS_POINTER)


@pytest.mark.browser
def test_gold_solves_and_empty_scores_zero(web_bwrap_backend):
    env = gymnasium.make("arborl/MiniWoB-v0", backend=web_bwrap_backend)
    try:
        tasks = [SUITE.task(f"miniwob/{n}-s1") for n in SOLVED]
        gold = run_episodes_sync([env], lambda m, i: _gold(m, i, tasks), tasks, max_turns=SUITE.max_turns)
        for task, ep in zip(tasks, gold, strict=True):
            assert ep.error is None and ep.terminated, (task.id, ep.error)
            assert ep.rewards[-1] == 1.0, (task.id, ep.messages[-2:])
            outcome = ep.infos[-1]["miniwob"]
            assert outcome["done"] and outcome["raw"] == 1.0 and outcome["task"] == task.name
        assert ep.messages[1]["content"].startswith("Task: Select ")  # the page's own instruction
        empty = run_episodes_sync([env], SUITE.empty_policy(tasks[0]), tasks[:2], max_turns=SUITE.max_turns)
        assert [sum(ep.rewards) for ep in empty] == [0.0, 0.0]
        assert all(ep.terminated for ep in empty)
        # a wrong click is the page's failure: the episode ends at once with reward 0
        obs, _ = env.reset(options={"task": SUITE.task("miniwob/click-button-s0")})
        page = obs[-1]["content"]
        want = mw._quoted(mw._intent(obs))[0]
        wrong = next(ref for role, name, ref in mw._nodes(page) if role == "button" and name != want)
        _, reward, terminated, _, info = env.step(f"click({wrong})")
        assert terminated and reward == 0.0 and info["miniwob"]["raw"] == -1.0
        with pytest.raises(TaskError, match="no task"):
            env.reset(options={"task": {"id": "x", "name": "no-such-task"}})
    finally:
        env.close()


def _gold(messages, info, tasks):
    # run_episodes hands one policy every task: pick the task by its instruction's page
    first = next(m["content"] for m in messages if m.get("role") == "user")
    task = next(t for t in tasks if f"/miniwob/{t.name}.html" in first)
    return SUITE.gold_policy(task)(messages, info)


@pytest.mark.browser
@pytest.mark.slow
def test_arborl_eval_suite_web_miniwob(tmp_path, web_chromium, bwrap_backend):
    cmd = [sys.executable, "-m", "arborl.cli.main", "eval", "suite=web-miniwob", "sandbox=bwrap",
           "concurrency=2", "report=false", "tasks=[miniwob/click-test-s0,miniwob/enter-password-s0]"]  # fmt: skip
    for agent, resolved in (("gold", "2/2"), ("empty", "0/2")):
        res = subprocess.run(
            [*cmd, f"agent={agent}", f"run.dir={agent}"],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        assert f"resolved {resolved}" in res.stdout, res.stdout[-2000:]
