"""Compose arborl's Hydra config (cli/conf) with command-line overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

CONF_DIR = Path(__file__).with_name("conf")


def load_config(overrides: list[str] | None = None, name: str = "config") -> DictConfig:
    """`overrides` are Hydra's: `pool.max_size=4`, `sandbox=local`, `+new.key=1`; `name` is the
    primary config (`config`, or `train` for `arborl train`)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name=name, overrides=list(overrides or []))


def section(cfg: DictConfig, key: str) -> dict[str, Any]:
    """One config section as a plain dict, ready for a pydantic model."""
    return OmegaConf.to_container(cfg[key], resolve=True)  # type: ignore[return-value]
