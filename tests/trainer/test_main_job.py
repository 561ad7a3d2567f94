"""One source of defaults: `arborl train` with no overrides runs `TrainConfig.main_job()`, the
recipe names only where it differs from the fields' defaults, and the Hydra tree is generated."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from arborl.cli.config import CONF_DIR
from arborl.cli.train_cmds import compose_train
from arborl.trainer.local.config import MAIN_JOB, TrainConfig


def leaves(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a.b": value}` for every leaf of a nested dict (a dict value that is empty is a leaf)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_arborl_train_without_overrides_runs_the_main_job():
    _, composed = compose_train([])
    assert composed == TrainConfig.main_job()
    _, changed = compose_train(["learner.lr=1e-4", "async.mode=sync", "learner.warmup_steps=3"])
    assert (changed.learner.lr, changed.async_.mode, changed.learner.warmup_steps) == (1e-4, "sync", 3)
    assert changed.sft == composed.sft and changed.tasks == composed.tasks


def test_every_field_is_in_the_composed_tree_and_nowhere_else_in_cli_conf():
    cfg, _ = compose_train([])
    sections = {f.alias or name for name, f in TrainConfig.model_fields.items()}
    tree = leaves({k: OmegaConf.to_container(cfg[k]) for k in sections})
    assert set(tree) == set(leaves(TrainConfig.main_job().model_dump(by_alias=True, mode="json")))
    written = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "train.yaml"))
    assert not sections & set(written), "train.yaml restates a section of TrainConfig.main_job()"


def test_the_recipe_names_only_where_the_main_job_differs_from_the_defaults():
    recipe = leaves(OmegaConf.to_container(OmegaConf.load(MAIN_JOB)))
    defaults = leaves(TrainConfig().model_dump(by_alias=True, mode="json"))
    main_job = leaves(TrainConfig.main_job().model_dump(by_alias=True, mode="json"))
    restated = [k for k in recipe if k in defaults and defaults[k] == main_job[k]]
    assert not restated, f"main_job.yaml restates defaults: {restated}"
