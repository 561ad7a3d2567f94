"""Compose arborl's Hydra config (cli/conf) with command-line overrides.

One source for every setting: the sections are generated from the typed models into Hydra's
config store (`store_generated`), and the YAML files in cli/conf only compose them (and name
a recipe's few changes, as image/gui.yaml does):

    sandbox=<name>   each registered backend's config defaults (arborl.sandboxes.factory)
    image=base       arborl.sandboxes.images.BaseImageRecipe
    pool             arborl.sandboxes.PoolConfig
    demo             arborl.cli.demo.DemoConfig
    eval's keys      arborl.eval.config.EvalConfig          (`arborl eval`)
    main_job         arborl.trainer.local.config.TrainConfig.main_job()  (`arborl train`)

Unknown keys are errors everywhere, and `ConfigError` names the key and the keys there are.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf
from pydantic import BaseModel, ValidationError

CONF_DIR = Path(__file__).with_name("conf")
M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A config does not validate; the message says which key and what would be right."""


def load_config(overrides: list[str] | None = None, name: str = "config") -> DictConfig:
    """`overrides` are Hydra's: `pool.max_size=4`, `sandbox=bwrap`, `+new.key=1`; `name` is the
    primary config (`config`, `eval` or `train`). The sections every command shares (sandbox,
    pool, image, demo) are validated here."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    def composed(over: list[str]) -> DictConfig:
        GlobalHydra.instance().clear()
        store_generated(name)
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            return compose(config_name=name, overrides=over)

    cfg = compose_clearly(composed, list(overrides or []))
    check_shared_sections(cfg)
    return cfg


def store_generated(name: str = "config") -> None:
    """Put the sections generated from the typed models in Hydra's config store (module
    docstring): the shared ones, and the primary config `name`'s own (eval's keys, or the
    main job's sections)."""
    from hydra.core.config_store import ConfigStore

    from arborl.sandboxes import PoolConfig
    from arborl.sandboxes.factory import config_trees, defaults_tree
    from arborl.sandboxes.images import BaseImageRecipe

    from .demo import DemoConfig

    store = ConfigStore.instance()
    for backend, tree in config_trees().items():
        store.store(group="sandbox", name=backend, node=tree)
    store.store(group="image", name="base", node=defaults_tree(BaseImageRecipe))
    store.store(name="pool_section", node=defaults_tree(PoolConfig), package="pool")
    store.store(name="demo_section", node=defaults_tree(DemoConfig), package="demo")
    if name == "eval":
        from arborl.eval.config import EvalConfig

        # its fields, and each registered benchmark's own section (`Benchmark.options`)
        tree = defaults_tree(EvalConfig)
        tree.update({key: defaults_tree(model) for key, model in EvalConfig.section_models().items()})
        store.store(name="eval_sections", node=tree)
    if name == "train":
        from arborl.trainer.local.config import TrainConfig

        # every field in it, so that any key is overridden without ``+``
        store.store(name="main_job", node=TrainConfig.main_job().model_dump(by_alias=True, mode="json"))


#: The sections of the root config that every command shares, and what validates each.
SHARED_SECTIONS = ("sandbox", "pool", "image", "demo")


def check_shared_sections(cfg: DictConfig) -> None:
    """Validate the shared sections of a composed config (`ConfigError` names what is wrong)."""
    from arborl.sandboxes import PoolConfig, UnknownBackend
    from arborl.sandboxes.factory import backend_config_class
    from arborl.sandboxes.images import BaseImageRecipe

    from .demo import DemoConfig

    if "sandbox" in cfg and cfg.sandbox is not None:
        sandbox = section(cfg, "sandbox")
        try:
            model = backend_config_class(str(sandbox.get("type")))
        except UnknownBackend as e:
            raise ConfigError(f"sandbox.type: {e}") from None
        validated(model, sandbox, "sandbox")
    for key, model in (("pool", PoolConfig), ("image", BaseImageRecipe), ("demo", DemoConfig)):
        if key in cfg:
            validated(model, section(cfg, key), key)


def section(cfg: DictConfig, key: str) -> dict[str, Any]:
    """One config section as a plain dict, ready for a pydantic model."""
    return OmegaConf.to_container(cfg[key], resolve=True)  # type: ignore[return-value]


def sections(cfg: DictConfig, leave_out: Iterable[str] = SHARED_SECTIONS) -> dict[str, Any]:
    """The composed config as plain data, without the shared sections (a command's own keys)."""
    values = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(values, dict)
    return {str(k): v for k, v in values.items() if k not in set(leave_out)}


# ---- clear errors -------------------------------------------------------------------------------
def validated(model: type[M], data: Mapping[str, Any], where: str = "") -> M:
    """`model` validated from `data` (the section `where` of the config, '' for the root); a
    `ConfigError` naming each wrong key, and for an unknown one the keys there are."""
    try:
        return model.model_validate(dict(data))
    except ValidationError as e:
        raise ConfigError(explain(e, model, where)) from None


def explain(error: ValidationError, model: type[BaseModel], where: str = "") -> str:
    """`error`'s problems one per line: an unknown key with the keys its section has."""
    lines = []
    for err in error.errors():
        loc = [str(part) for part in err["loc"]]
        key = ".".join([where, *loc] if where else loc)
        if err["type"] == "extra_forbidden":
            parent = ".".join([where, *loc[:-1]] if where else loc[:-1]) or "the root config"
            known = field_names(model_at(model, err["loc"][:-1]))
            lines.append(f"unknown key {key!r}; the keys of {parent} are: {', '.join(known) or '?'}")
        else:
            lines.append(f"{key or where or 'config'}: {err['msg']} (got {err.get('input')!r})")
    return "\n".join(lines)


def model_at(model: type[BaseModel] | None, loc: Iterable[int | str]) -> type[BaseModel] | None:
    """The model of the section at `loc` inside `model` (None when it is not a model)."""
    for part in loc:
        if model is None:
            return None
        fields = {f.alias or n: f for n, f in model.model_fields.items()}
        field = fields.get(str(part))
        model = _model_in(field.annotation) if field is not None else _sections(model).get(str(part))
    return model


def _sections(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The sections a model takes beyond its fields (eval's: the benchmarks', `section_models`)."""
    found = getattr(model, "section_models", None)
    return found() if callable(found) else {}


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (`X`, `X | None`, `Annotated[X, ...]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def field_names(model: type[BaseModel] | None) -> list[str]:
    if model is None:
        return []
    return [f.alias or n for n, f in model.model_fields.items()] + list(_sections(model))


_NOT_THERE = re.compile(r"Could not override '([^']+)'")


def compose_clearly(compose: Callable[[list[str]], DictConfig], overrides: list[str]) -> DictConfig:
    """`compose(overrides)`; an override of a key the config does not have (Hydra: "Could not
    override") becomes a `ConfigError` naming the keys its section has."""
    from hydra.errors import ConfigCompositionException

    try:
        return compose(overrides)
    except ConfigCompositionException as e:
        found = _NOT_THERE.match(str(e))
        if found is None:
            raise
        key = found.group(1)
        rest = [o for o in overrides if o.split("=", 1)[0].lstrip("~") != key]
    parent, _, _ = key.rpartition(".")
    try:
        node = OmegaConf.select(compose(rest), parent) if parent else compose(rest)
    except ConfigCompositionException:
        node = None
    known = [str(k) for k in node] if isinstance(node, DictConfig) else []
    where = parent or "the root config"
    if not known:  # a free-form mapping (e.g. env_kwargs: {}) takes new keys with a +
        raise ConfigError(f"unknown key {key!r}: {where} has none yet; add one with +{key}=...") from None
    raise ConfigError(f"unknown key {key!r}; the keys of {where} are: {', '.join(known)}") from None


def config_cells(entry: Any) -> tuple[str, str]:
    """A registry entry's config model as `arborl engines` / `arborl sandbox backends` list it:
    ("module:Class", its keys). A plug-in whose config cannot load says why instead, so the
    other entries are still listed."""
    try:
        config = entry.config_class()
    except Exception as e:
        return str(entry.config), f"[red]cannot load: {type(e).__name__}: {e}[/red]"
    keys = ", ".join(k for k in config.model_fields if k != "type")
    return f"{config.__module__}:{config.__qualname__}", keys
