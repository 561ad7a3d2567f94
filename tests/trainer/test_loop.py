"""The training run end to end on the tiny model: sync and async modes, the run directory,
and resume after a real `arborl train` process is killed with SIGKILL."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium
import pytest
from arith_suite import train_config as config  # also registers the test-arith suite

from arborl.agents import read_trajectories
from arborl.envs import register_env
from arborl.envs.base import Step, TextEnv
from arborl.envs.state_hash import record_failure
from arborl.tasks.stream import task_stream
from arborl.trainer.local.checkpoint import Checkpointer
from arborl.trainer.local.metrics_log import read_metrics
from arborl.trainer.local.report import write_report
from arborl.trainer.local.rollout import RolloutError
from arborl.trainer.local.run_context import RunDirError
from arborl.trainer.local.trainer import Trainer
from arborl.trainer.local.warm_start import demo_tasks

HERE = Path(__file__).resolve().parent


def trained_once(run_dir: Path) -> list[int]:
    state = Checkpointer(run_dir).load(Checkpointer(run_dir).latest())[1]
    assert len(state.trained) == len(set(state.trained)), "a group was trained twice"
    return state.trained


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_run_warm_starts_trains_and_records_everything(tmp_path, mode):
    run = tmp_path / mode
    cfg = config(run, **{"async": {"mode": mode, "max_staleness": 1}})
    summary = asyncio.run(Trainer(cfg).run())
    assert summary["rl_steps"] == 4 and summary["sft_steps"] == 3
    events = read_metrics(run)
    rl = [e for e in events if e["phase"] == "rl"]
    assert [e["step"] for e in rl] == [1, 2, 3, 4]
    assert {e["phase"] for e in events} >= {"sft", "eval-sft", "eval-rl", "rl"}
    limit = 0 if mode == "sync" else 1
    assert all(e["staleness/max"] <= limit for e in rl)
    # where a step's time went: waiting for groups, training, pushing the weights
    assert all(e["time/push_s"] >= 0 and e["time/wait_s"] >= 0 and e["time/train_s"] > 0 for e in rl)
    assert all(e["time/elapsed_s"] >= e["time/train_s"] + e["time/push_s"] for e in rl)
    trained = trained_once(run)
    assert len(trained) == 8  # 4 steps x 2 groups
    for index in trained:  # every trained group is in the store, whole
        trajs = read_trajectories(run / "trajectories" / f"group-{index:06d}.parquet")
        assert len(trajs) == 3 and {t.group_id for t in trajs} == {f"group-{index}"}
    assert len(read_trajectories(run / "sft" / "demos.parquet")) == 8
    png, page = write_report([run])
    assert png.stat().st_size > 10_000 and "training report" in page.read_text()


def test_demonstrations_the_context_cut_are_named_when_left_out(tmp_path, caplog):
    """A demonstration that does not fit `rollout.max_context_tokens` fails its task through
    the config, not the policy, and leaving it out keeps the short ones (a bias): the warning
    says how many were cut and which option keeps them."""
    from arborl.trainer.local.progress import Progress
    from arborl.trainer.local.run_context import RunContext
    from arborl.trainer.local.warm_start import WarmStart

    async def collect(limit):
        ctx = RunContext(config(tmp_path / str(limit), rollout={"max_context_tokens": limit}), Progress())
        ctx.open()
        try:
            return await WarmStart(ctx).demonstrations()
        finally:
            await ctx.close()

    with caplog.at_level("WARNING"):
        assert asyncio.run(collect(150)) == []  # the arith gold's two turns need ~200 tokens
    assert "8 of 8 demonstrations failed their task (8 of them cut by the context" in caplog.text
    assert "rollout.max_context_tokens=150" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert len(asyncio.run(collect(400))) == 8
    assert "failed their task" not in caplog.text


def test_the_warm_starts_micro_batch_reaches_its_learner(tmp_path, monkeypatch):
    """`sft.micro_batch_size` splits each SFT batch's forward (test_learner: micro-batching does
    not change the gradient); unset, the whole batch goes at once, as before."""
    import arborl.trainer.local.warm_start as ws

    made = []

    class Capturing(ws.Learner):
        def __init__(self, model, cfg, **kw):
            made.append(cfg.micro_batch_size)
            super().__init__(model, cfg, **kw)

    monkeypatch.setattr(ws, "Learner", Capturing)
    for name, sft in (("whole", {}), ("split", {"micro_batch_size": 2})):
        cfg = config(tmp_path / name, sft={"steps": 1, **sft}, run={"steps": 0})
        asyncio.run(Trainer(cfg).run())
    assert made == [4, 2]  # arith's sft.batch_size is 4


def test_a_run_directory_is_not_overwritten(tmp_path):
    cfg = config(tmp_path / "r", sft={"steps": 0}, run={"steps": 1, "resume": False})
    asyncio.run(Trainer(cfg).run())
    with pytest.raises(RunDirError, match="already holds a run"):
        asyncio.run(Trainer(cfg).run())


def arborl_train(run_dir: Path, *overrides: str) -> subprocess.Popen:
    args = [
        "tasks.train=arith_suite:generate",
        "tasks.train_size=200",
        "tasks.eval_suite=test-arith",
        "tasks.eval_size=4",
        "rollout.group_size=3",
        "rollout.groups_per_step=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=12",
        "sft.steps=0",
        "model.tiny={}",  # the test-sized tiny model
        "run.eval_every=100",
        "run.checkpoint_every=2",
        "run.time_budget_min=null",
        f"run.dir={run_dir}",
        *overrides,
    ]
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    return subprocess.Popen(
        [sys.executable, "-m", "arborl.cli.main", "train", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_the_main_job_ends_with_each_phases_own_held_out_success(tmp_path):
    """`arborl train`'s last lines: the warm start's and RL's own before → after, read from
    the evaluations the run logged (RL's before is its step 0, after the warm start)."""
    run = tmp_path / "main"
    warm_start = ["sft.steps=2", "sft.demos=8", "sft.batch_size=4", "sft.train_options=null", "sft.gold=null"]
    proc = arborl_train(run, *warm_start, "sft.max_turns=null", "run.steps=1")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    success = {(e["phase"], e["step"]): e["success"] for e in read_metrics(run) if "success" in e}
    sft = f"{success['eval-sft', 0]:.0%} → {success['eval-sft', 2]:.0%}"
    rl = f"{success['eval-rl', 0]:.0%} → {success['eval-rl', 1]:.0%}"
    lines = out.strip().splitlines()
    assert lines[-3].startswith(f"warm start (2 steps): held-out success {sft} "), out[-2000:]
    assert lines[-2].startswith(f"RL (1 step): held-out success {rl} "), out[-2000:]
    assert lines[-1].startswith("report: ")


@pytest.mark.slow
def test_resume_after_sigkill_loses_and_repeats_no_group(tmp_path):
    run = tmp_path / "killed"
    proc = arborl_train(run, "run.steps=200")
    deadline = time.time() + 240
    while time.time() < deadline:  # kill it mid-run, after its second checkpoint
        latest = Checkpointer(run).latest()
        # at or past step 4: on an idle machine a poll may fall between two checkpoints
        if latest is not None and int(latest.name.split("-")[1]) >= 4:
            break
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("no checkpoint at step 4 within 240 s")
    time.sleep(0.5)  # let it get a little past the checkpoint: trained and stored groups to roll back
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stored_before = {int(p.stem.split("-")[1]) for p in (run / "trajectories").glob("group-*.parquet")}
    # On an idle machine the tiny run may pass several more checkpoints in that half second:
    # continue for 4 steps past the last one, so the resumed run always has steps to train.
    steps = int(Checkpointer(run).latest().name.split("-")[1]) + 4

    again = arborl_train(run, f"run.steps={steps}")
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out
    trained = trained_once(run)
    assert len(trained) == 2 * steps  # steps x 2 groups, each once
    stored = {int(p.stem.split("-")[1]) for p in (run / "trajectories").glob("group-*.parquet")}
    assert stored_before <= stored  # nothing collected before the kill was lost...
    assert set(trained) <= stored  # ...and everything trained on is on disk
    state = Checkpointer(run).load(Checkpointer(run).latest())[1]
    accounted = set(trained) | set(state.dropped) | set(state.buffered)
    assert stored <= accounted  # every stored group is trained, dropped as stale, or still buffered
    rl = [e["step"] for e in read_metrics(run) if e["phase"] == "rl"]
    assert rl == list(range(1, steps + 1))  # one continued lineage; the rolled-back steps are marked
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rl_steps"] == steps


def test_kl_to_the_starting_policy_and_a_step_level_estimator(tmp_path):
    record_failure("EarlierEnv", ValueError("a failure before this run"))  # the process's count
    cfg = config(
        tmp_path / "kl",
        sft={"steps": 0},
        learner={"use_kl_loss": True, "kl_loss_coef": 0.05},
        algorithm={
            "estimator": "gigpo",
            "drop_uniform_groups": False,
            # verl-agent's variant, through the config path issue 34's runs use
            "estimator_options": {"episode_norm": "step_rows", "enable_similarity": True},
        },
        run={"steps": 2},
    )
    asyncio.run(Trainer(cfg).run())
    rl = [e for e in read_metrics(tmp_path / "kl") if e["phase"] == "rl"]
    assert len(rl) == 2 and all("actor/kl_loss" in e for e in rl)
    # every episode of a task starts from its reset state: the first turns of a group share an
    # anchor, so some turns are in non-singleton groups and a group holds more than one turn
    for e in rl:
        assert 0 < e["anchors/turns_shared"] <= 1 and e["anchors/group_size"] > 1, e
        assert 0 <= e["batch/uniform_group_fraction"] <= 1
        # the first turns of a group recur across its episodes; every state hashed
        assert e["anchors/turns_recurring"] > 0 and 0 <= e["anchors/step_nonzero"] <= 1, e
        assert e["rollout/state_hash_failures"] == 0  # this run's, not the process's


class ToolsDown(gymnasium.Wrapper):
    """The tool env with its tool server down: every step raises (an env fault, not the model's)."""

    async def areset(self, **kwargs):
        return await self.env.unwrapped.areset(**kwargs)

    async def astep(self, action):
        raise ConnectionError("tool server unreachable")

    async def afinish(self):
        return await self.env.unwrapped.afinish()

    async def aclose(self):
        await self.env.unwrapped.aclose()


def test_an_env_that_keeps_failing_stops_the_run_with_its_error_instead_of_hanging(tmp_path):
    """Groups left empty by env faults are replaced by fresh ones (so the learner's batch can
    still fill) until 8 in a row failed: then the run stops and says why."""
    register_env(
        "test/ToolsDown-v0", lambda **kw: ToolsDown(gymnasium.make("arborl/Tool-v0", **kw)), force=True
    )
    cfg = config(tmp_path / "down", sft={"steps": 0}, rollout={"env_id": "test/ToolsDown-v0"})
    with pytest.raises(
        RolloutError, match=r"8 groups in a row .* env_error: ConnectionError: tool server unreachable"
    ):
        asyncio.run(Trainer(cfg).run())
    evals = [e for e in read_metrics(tmp_path / "down") if e["phase"] == "eval-rl"]
    assert evals[0]["success"] == 0.0  # the evaluation ran and scored the failures, then RL stopped


class Chatter(TextEnv):
    """Two turns whatever the model says (reward: an even-length reply). On one task the first
    step returns only after the learner's first update was logged: that task's group spans
    the first weight push, wherever the machine's timing falls."""

    slow_task = ""
    run_dir = Path()

    async def on_reset(self, task):
        return str(task.question)

    async def on_step(self, action):
        if self.task_id == Chatter.slow_task and self.turn == 0:
            for _ in range(1200):
                if any(e["phase"] == "rl" for e in read_metrics(Chatter.run_dir)):
                    break
                await asyncio.sleep(0.05)
        done = self.turn + 1 >= 2
        return Step("go on", reward=float(done and len(action) % 2 == 0), terminated=done)


def test_sync_partial_rollouts_resume_unfinished_episodes_under_the_new_weights(tmp_path):
    """APRIL in sync mode: one group a batch, one over-provisioned. The slow group is
    mid-episode when another fills the batch; it runs on with the pushed weights (its tokens
    carry both versions) and is trained in a later batch, once; nothing is lost."""
    from arborl.tasks.stream import task_stream

    Chatter.slow_task = task_stream("arith_suite:generate", 200, 0)(1).id  # group 1's task
    Chatter.run_dir = run = tmp_path / "april"
    register_env("test/Chatter-v0", Chatter, force=True)
    cfg = config(
        run,
        sft={"steps": 0},
        rollout={"env_id": "test/Chatter-v0", "group_size": 2, "groups_per_step": 1, "max_turns": 2},
        algorithm={"drop_uniform_groups": False},
        run={"steps": 4, "eval_every": 10, "checkpoint_every": 10},
        **{"async": {"mode": "sync", "partial_rollouts": True, "overprovision": 2.0}},
    )
    asyncio.run(Trainer(cfg).run())
    trained = trained_once(run)  # nothing trained twice
    assert trained[0] == 0 and 1 in trained[1:] and len(trained) == 4
    slow = read_trajectories(run / "trajectories" / "group-000001.parquet")
    assert len(slow) == 2  # nothing lost: both episodes of the group that spanned the push
    for traj in slow:
        first, second = ({v for v in turn.policy_versions} for turn in traj.turns)
        assert first == {0} and min(second) >= 1, (first, second)  # turn 2 after the push
    fast = read_trajectories(run / "trajectories" / "group-000000.parquet")
    assert {v for t in fast for turn in t.turns for v in turn.policy_versions} == {0}


def test_partial_rollouts_are_refused_in_async_mode(tmp_path):
    with pytest.raises(ValueError, match=r"async\.partial_rollouts=true is APRIL's sync-mode scheme"):
        config(tmp_path, **{"async": {"mode": "async", "partial_rollouts": True}})


def test_a_warm_start_on_some_task_kinds_only(tmp_path):
    """`sft.train_options` draws the demonstrations' tasks from the same generator under other
    options (ReTool-style cold start: some kinds demonstrated, RL learns the rest)."""
    cfg = config(
        tmp_path / "run",
        tasks={
            "train": "arborl.tasks.toy.tool_mini:generate_tool_tasks",
            "train_options": {"counterfactual": 1.0},
        },
        sft={"demos": 12, "train_options": {"kinds": ["lookup", "multi"]}},
    )
    t = cfg.tasks
    demos = demo_tasks(cfg, task_at=task_stream(t.train, t.train_size, t.seed, t.train_options))
    assert len(demos) == 12 and {t.metadata["kind"] for t in demos} == {"lookup", "multi"}
    assert all(t.metadata["world"] == "counterfactual" for t in demos)  # tasks.train_options kept


def test_demonstrations_get_their_own_turn_budget(tmp_path):
    """An exploring demonstrator (tool-maze's random door, back after a dead end) needs more
    turns than RL's budget: with `sft.max_turns` none of its episodes is cut short and left
    out for the doors it picked; without it, the walks with two or three wrong doors are."""
    kept = {}
    for name, turns in (("rl-budget", None), ("own-budget", 7)):
        cfg = config(
            tmp_path / name,
            tasks={
                "train": "arborl.tasks.toy.tool_maze:generate_maze_tasks",
                "eval_suite": "tool-maze",
                "eval_size": 1,
            },
            rollout={"max_turns": 5, "max_new_tokens": 4},
            sft={
                "steps": 1,
                "demos": 16,
                "gold": "arborl.tasks.toy.tool_maze:explore_policy",
                "max_turns": turns,
            },
            run={"steps": 0},
        )
        asyncio.run(Trainer(cfg).run())
        kept[name] = read_trajectories(tmp_path / name / "sft" / "demos.parquet")
    assert len(kept["own-budget"]) == 16
    assert max(len(t.turns) for t in kept["own-budget"]) > 5
    assert 0 < len(kept["rl-budget"]) < 16
    assert all(len(t.turns) <= 5 for t in kept["rl-budget"])
