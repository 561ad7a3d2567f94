"""Launch verl's own PPO trainer on arborl envs, and build its datasets from arborl suites.

    arborl verl-data tool-mini data/tool-mini              # train.parquet / val.parquet
    arborl verl-train actor_rollout_ref.model.path=Qwen/Qwen2.5-1.5B-Instruct trainer.n_gpus_per_node=8
    arborl verl-train --cpu actor_rollout_ref.model.path=PATH   # the same trainer on a CPU host

`compose_verl_config` composes `trainer/verl/arborl_ppo.yaml` (verl's ``ppo_trainer`` found on
Hydra's search path, arborl's agent loop and ``arborl:`` section on top, that section and the
``sandbox`` group generated from their typed models (`store_arborl_config`); with ``cpu=True``
`trainer/verl/platform/cpu.yaml` over it) with Hydra overrides, ``+key=value`` included.
`run_verl` does what verl's own ``main`` does (device auto-set, config validation) and then
verl's ``run_ppo`` with `ArborlTaskRunner`: verl's ``TaskRunner`` whose ``run`` first makes the
driver process ready for arborl (estimators registered, their per-row fields passed;
`arborl.trainer.verl.credit`). Training itself is verl's ``RayPPOTrainer``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent  # arborl_ppo.yaml, agent_loops.yaml, platform/
VERL_CONFIG = "pkg://verl.trainer.config"  # verl's own Hydra tree (ppo_trainer and its groups)


def store_arborl_config() -> None:
    """Put arborl's generated config in Hydra's config store: the `sandbox` group (each
    registered backend's defaults, the same options as `arborl train` and `arborl eval` have)
    and the ``arborl:`` section (`ArborlSection`'s defaults)."""
    from hydra.core.config_store import ConfigStore

    from arborl.sandboxes.factory import config_trees
    from arborl.trainer.verl.config import section_defaults

    store = ConfigStore.instance()
    for backend, tree in config_trees().items():
        store.store(group="sandbox", name=backend, node=tree)
    store.store(name="arborl_section", node=section_defaults(), package="arborl")


def compose_verl_config(overrides: list[str] | None = None, cpu: bool = False) -> Any:
    """verl's PPO config with arborl's agent loop wired in (an OmegaConf DictConfig, struct).

    ``overrides`` are Hydra's: ``key=value`` for keys verl's tree has, ``+key=value`` to add one
    (e.g. ``+actor_rollout_ref.rollout.enable_sleep_mode=false``), ``~key`` to delete."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    GlobalHydra.instance().clear()
    store_arborl_config()
    with initialize_config_dir(config_dir=str(HERE), version_base=None):
        cfg = compose(
            config_name="arborl_ppo",
            overrides=[
                f"hydra.searchpath=[{VERL_CONFIG}]",
                *(["+platform=cpu"] if cpu else []),
                *(overrides or []),
            ],
        )
    with open_dict(cfg):
        if cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path in (None, "???"):
            cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path = str(HERE / "agent_loops.yaml")
    return cfg


def build_verl_dataset(suite_name: str, out_dir: str | Path, val_fraction: float = 0.1) -> tuple[Path, Path]:
    """Write a suite's tasks as verl RL datasets: ``prompt`` (chat messages, what verl's
    dataset tokenizes for length filtering), ``task`` (the task as JSON text, what arborl's
    loop runs), ``agent_name``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from arborl.tasks import get_suite

    suite = get_suite(suite_name)
    rows = []
    for task in suite.tasks():
        question = getattr(task, "question", None) or getattr(task, "problem_statement", None) or task.id
        rows.append(
            {
                "data_source": f"arborl/{suite_name}",
                "prompt": [{"role": "user", "content": str(question)}],
                "task": task.model_dump_json(),  # JSON text: Parquet cannot hold every task shape
                "agent_name": "arborl_agent",
                "reward_model": {"style": "env", "ground_truth": ""},
                "extra_info": {"task_id": task.id},
            }
        )
    n_val = max(1, int(len(rows) * val_fraction)) if len(rows) > 1 else 0
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train, val = out / "train.parquet", out / "val.parquet"
    pq.write_table(pa.Table.from_pylist(rows[n_val:]), train)
    pq.write_table(pa.Table.from_pylist(rows[:n_val] or rows[:1]), val)
    return train, val


def run_verl(overrides: list[str] | None = None, cpu: bool = False) -> None:
    """verl's PPO training with arborl's agent loop and estimators, as verl's ``main`` runs it.

    ``cpu=True`` runs it on a CPU host (tests, a laptop): the CPU platform and patches of
    `arborl.trainer.verl.cpu` in every process of the run, and the CPU preset config."""
    if cpu:
        from arborl.trainer.verl import cpu as cpu_platform

        os.environ.update(cpu_platform.cpu_environ())  # before Ray starts: its workers inherit it
        cpu_platform.install()
    cfg = compose_verl_config(overrides, cpu=cpu)
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    if cfg.trainer.get("use_v1", False):
        raise ValueError(
            "trainer.use_v1=true is verl's TransferQueue trainer, which arborl's driver hooks do not "
            "cover yet: keep trainer.use_v1=false (arborl_ppo.yaml's default)"
        )
    from arborl.trainer.verl.config import ArborlSection

    log = ArborlSection.of(cfg).credit_log  # an unknown key of the section fails here, before Ray
    if log:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
    auto_set_device(cfg)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    from arborl.trainer.verl.driver import ArborlTaskRunnerActor

    run_ppo(cfg, task_runner_class=ArborlTaskRunnerActor)
