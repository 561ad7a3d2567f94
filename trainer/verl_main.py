"""Launch verl's own PPO trainer on arborl envs, and build its datasets from arborl suites.

    arborl verl-data tool-mini data/tool-mini              # train.parquet / val.parquet
    arborl verl-train actor_rollout_ref.model.path=Qwen/Qwen2.5-1.5B-Instruct trainer.n_gpus_per_node=8

`compose_verl_config` composes `trainer/verl/arborl_ppo.yaml` over verl's `ppo_trainer`
(verl's Hydra config tree) and points verl at arborl's agent-loop registry entry, so verl's
`AgentLoopWorker`s run `ArborlAgentLoop`. Training itself is verl's (`run_ppo`): GPU hosts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "verl"


def compose_verl_config(overrides: list[str] | None = None) -> Any:
    """verl's PPO config with arborl's agent loop wired in (an OmegaConf DictConfig)."""
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    verl_conf = Path(verl.__file__).parent / "trainer" / "config"
    # arborl's file extends verl's ppo_trainer: compose from verl's directory with ours on top.
    with initialize_config_dir(config_dir=str(verl_conf), version_base=None):
        base = compose(config_name="ppo_trainer")
    ours = OmegaConf.load(HERE / "arborl_ppo.yaml")
    ours.pop("defaults", None)
    OmegaConf.set_struct(base, False)  # verl's tree is closed; arborl adds its own section
    cfg = OmegaConf.merge(base, ours)
    OmegaConf.set_struct(cfg, True)
    cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path = str(HERE / "agent_loops.yaml")
    cfg.merge_with_dotlist(list(overrides or []))
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


def run_verl(overrides: list[str] | None = None) -> None:
    """verl's PPO training (`verl.trainer.main_ppo.run_ppo`) with arborl's agent loop."""
    from verl.trainer.main_ppo import run_ppo

    run_ppo(compose_verl_config(overrides))
