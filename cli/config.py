"""Compose arborl's Hydra config (cli/conf) with command-line overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

CONF_DIR = Path(__file__).with_name("conf")


def load_config(overrides: list[str] | None = None, name: str = "config") -> DictConfig:
    """`overrides` are Hydra's: `pool.max_size=4`, `sandbox=bwrap`, `+new.key=1`; `name` is the
    primary config (`config`, or `train` for `arborl train`)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    if name == "train":
        _store_main_job()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name=name, overrides=list(overrides or []))


def _store_main_job() -> None:
    """`main_job` in Hydra's config store: `TrainConfig.main_job()` as a plain tree, every
    field in it (so any key is overridden without ``+``), generated so that the composed
    config and the model cannot disagree."""
    from hydra.core.config_store import ConfigStore

    from arborl.trainer.local.config import TrainConfig

    tree = TrainConfig.main_job().model_dump(by_alias=True, mode="json")
    ConfigStore.instance().store(name="main_job", node=tree)


def section(cfg: DictConfig, key: str) -> dict[str, Any]:
    """One config section as a plain dict, ready for a pydantic model."""
    return OmegaConf.to_container(cfg[key], resolve=True)  # type: ignore[return-value]
