"""Build an engine from its config: a registry of lazy ``"module:Class"`` entry points.

Backends import their heavy dependencies (vllm, httpx) only when built, so importing
`arborl.agents.engines` stays cheap and works where vLLM is not installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, TypeAdapter

from arborl.tasks.common import load_entry_point

from .base import InferenceEngine
from .config import EngineConfig

_ENTRY_POINTS: dict[str, str] = {
    "transformers": "arborl.agents.engines.hf:HFEngine",
    "vllm": "arborl.agents.engines.vllm:VLLMEngine",
    "openai": "arborl.agents.engines.openai:OpenAIEngine",
}
_ADAPTER: TypeAdapter[EngineConfig] = TypeAdapter(EngineConfig)


def register_engine(kind: str, entry_point: str) -> None:
    """Register a backend: configs with ``type == kind`` build ``entry_point`` ("module:Class")."""
    if kind in _ENTRY_POINTS and _ENTRY_POINTS[kind] != entry_point:
        raise ValueError(f"engine {kind!r} is already registered as {_ENTRY_POINTS[kind]}")
    _ENTRY_POINTS[kind] = entry_point


def engine_kinds() -> list[str]:
    """Registered backend names."""
    return sorted(_ENTRY_POINTS)


def parse_engine_config(config: BaseModel | Mapping[str, Any]) -> BaseModel:
    """Validate a mapping (e.g. from Hydra) into the typed config its ``type`` names."""
    if isinstance(config, BaseModel):
        return config
    return _ADAPTER.validate_python(dict(config))


def make_engine(config: BaseModel | Mapping[str, Any]) -> InferenceEngine:
    """Build the engine that `config` describes (``type``: transformers | vllm | openai)."""
    cfg = parse_engine_config(config)
    kind = getattr(cfg, "type", None)
    if kind not in _ENTRY_POINTS:
        raise ValueError(f"unknown engine type {kind!r}; registered: {engine_kinds()}")
    cls = load_entry_point(_ENTRY_POINTS[kind])
    engine: InferenceEngine = cls(cfg)
    return engine
