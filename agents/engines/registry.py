"""The engine registry: everything that builds an engine (the eval, the gateway, the trainer)
goes through it, so a new engine is a folder plus one line here (or one `register_engine`
call from outside the package).

Each entry names the engine class and its config model, as lazy ``"module:Class"`` entry
points (backends import their heavy dependencies, vllm or httpx, only when built, so
importing `arborl.agents.engines` stays cheap and works where vLLM is not installed) or as
the classes themselves. The config model has ``type: Literal["<kind>"]`` and
``extra="forbid"``; the engine class takes it (``cls(config)``) and, to generate for arborl's
trainer, implements `InferenceEngine.for_trainer`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from arborl.tasks.common import load_entry_point

from .base import InferenceEngine, TrainerPolicy


@dataclass(frozen=True)
class EngineEntry:
    """One registered engine: its class and its config model (entry points or the objects)."""

    engine: str | type[InferenceEngine]
    config: str | type[BaseModel]

    def engine_class(self) -> type[InferenceEngine]:
        cls = load_entry_point(self.engine) if isinstance(self.engine, str) else self.engine
        assert isinstance(cls, type) and issubclass(cls, InferenceEngine), f"{self.engine} is not an engine"
        return cls

    def config_class(self) -> type[BaseModel]:
        cls = load_entry_point(self.config) if isinstance(self.config, str) else self.config
        assert isinstance(cls, type) and issubclass(cls, BaseModel), f"{self.config} is not a pydantic model"
        return cls


# One line per engine.
ENGINES: dict[str, EngineEntry] = {
    "transformers": EngineEntry(
        "arborl.agents.engines.hf:HFEngine", "arborl.agents.engines.config:HFEngineConfig"
    ),
    "vllm": EngineEntry(
        "arborl.agents.engines.vllm:VLLMEngine", "arborl.agents.engines.config:VLLMEngineConfig"
    ),
    "openai": EngineEntry(
        "arborl.agents.engines.openai:OpenAIEngine", "arborl.agents.engines.config:OpenAIEngineConfig"
    ),
}


def register_engine(kind: str, engine: str | type[InferenceEngine], config: str | type[BaseModel]) -> None:
    """Register an engine: configs with ``type == kind`` validate into `config` and build `engine`.
    Registering a kind again with another entry is an error."""
    entry = EngineEntry(engine, config)
    if kind in ENGINES and ENGINES[kind] != entry:
        raise ValueError(f"engine {kind!r} is already registered as {ENGINES[kind]}")
    ENGINES[kind] = entry


def engine_kinds() -> list[str]:
    """Registered engine names."""
    return sorted(ENGINES)


def engine_entry(kind: str) -> EngineEntry:
    try:
        return ENGINES[kind]
    except KeyError:
        raise ValueError(f"unknown engine type {kind!r}; registered: {', '.join(engine_kinds())}") from None


def engine_config_class(kind: str) -> type[BaseModel]:
    """The config model of engine `kind`."""
    return engine_entry(kind).config_class()


def parse_engine_config(config: BaseModel | Mapping[str, Any]) -> BaseModel:
    """Validate a mapping (e.g. from Hydra) into the config model its ``type`` names."""
    if isinstance(config, BaseModel):
        return config
    data = dict(config)
    if "type" not in data:
        raise ValueError(f"an engine config needs a type ({', '.join(engine_kinds())}); got {sorted(data)}")
    return engine_config_class(str(data["type"])).model_validate(data)


def make_engine(config: BaseModel | Mapping[str, Any]) -> InferenceEngine:
    """Build the engine that `config` describes (``type``: one of `engine_kinds()`)."""
    cfg = parse_engine_config(config)
    cls = engine_entry(str(getattr(cfg, "type", None))).engine_class()
    build: Callable[[BaseModel], InferenceEngine] = cls  # an engine class takes its config
    return build(cfg)


def make_trainer_engine(
    kind: str, policy: TrainerPolicy, options: Mapping[str, Any] | None = None
) -> InferenceEngine:
    """The engine `kind` generating with a trainer's policy (`InferenceEngine.for_trainer`);
    `options` are more fields of its config."""
    return engine_entry(kind).engine_class().for_trainer(policy, dict(options or {}))
