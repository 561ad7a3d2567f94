"""Transformers engine: the CPU default, loaded with the real `from_pretrained(path)`.

A manual decode loop (not `model.generate`) so that sampling and log-probs follow the
convention in `base` exactly, with per-row parameters and per-row seeded generators::

    prompts (left-padded)      attention_mask         position_ids
    | P P a b c |              | 0 0 1 1 1 |          | 0 0 0 1 2 |
    | d e f g h |              | 1 1 1 1 1 |          | 0 1 2 3 4 |
      prefill once -> KV cache; then one token per row per step, mask and positions grow by 1

Rows that finish keep stepping (their outputs are ignored) until the whole batch is done. Generation runs on a worker thread (see `batching`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from .base import (
    EngineError,
    Generation,
    InferenceEngine,
    SamplingParams,
    WeightsSource,
    check_prompts,
)
from .batching import BatchRunner, Row, RowResult, expand_rows
from .config import HFEngineConfig
from .scoring import processed_logits, sample_rows, score_tokens
from .weights import load_state_dict_from_path

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _eos_ids(model: Any) -> set[int]:
    ids: set[int] = set()
    for cfg in (getattr(model, "generation_config", None), model.config):
        eos = getattr(cfg, "eos_token_id", None)
        if eos is not None:
            ids.update([eos] if isinstance(eos, int) else eos)
    return ids


class HFEngine(InferenceEngine):
    """Batched sampling with a transformers causal LM on CPU (or any torch device)."""

    kind = "transformers"

    def __init__(self, config: HFEngineConfig, model: Any | None = None) -> None:
        """Load `config.model` with `from_pretrained`, or wrap an already loaded `model`."""
        from transformers import AutoModelForCausalLM

        self.config = config
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        self.model: Any = model or AutoModelForCausalLM.from_pretrained(
            config.model, dtype=_DTYPES[config.dtype], attn_implementation=config.attn_implementation
        )
        self.model.to(config.device).eval()
        self.device = torch.device(config.device)
        self.eos_ids = _eos_ids(self.model)
        pad = getattr(self.model.config, "pad_token_id", None)
        self.pad_id = int(pad) if pad is not None else 0
        self.vocab_size = int(self.model.config.vocab_size)
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 1 << 30))
        self._runner = BatchRunner(self._run_rows, config.max_batch_size)
        self._reference: Any | None = None  # float64 copy for `score`, rebuilt after updates

    @property
    def weights_version(self) -> int:
        """How many weight updates have been applied."""
        return self._runner.weights_version

    async def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        import time

        start = time.perf_counter()
        checked = check_prompts(prompts, self.vocab_size)
        longest = max((len(p) for p in checked), default=0)
        if longest + sampling.max_new_tokens > self.max_positions:
            raise ValueError(
                f"prompt ({longest}) + max_new_tokens ({sampling.max_new_tokens}) exceeds the "
                f"model's {self.max_positions} positions"
            )
        return await self._runner.generate(expand_rows(checked, sampling), start)

    async def update_weights(self, weights: WeightsSource) -> None:
        """Copy `weights` into the model's parameters in place (same names as `state_dict()`)."""
        state = load_state_dict_from_path(weights) if isinstance(weights, str | Path) else dict(weights)
        await self._runner.exclusive(lambda: self._load(state))

    def _load(self, state: Mapping[str, torch.Tensor]) -> None:
        own = self.model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise EngineError(f"weights not in the model: {unknown[:5]} (names must match state_dict())")
        with torch.no_grad():
            for name, value in state.items():
                if own[name].shape != value.shape:
                    raise EngineError(f"{name}: shape {tuple(value.shape)} != {tuple(own[name].shape)}")
                own[name].copy_(value)
        self._reference = None

    async def close(self) -> None:
        self._reference = None

    def score(
        self,
        prompt_ids: Sequence[int],
        response_ids: Sequence[int],
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
    ) -> torch.Tensor:
        """Teacher-forced float64 log-probs of `response_ids` after `prompt_ids`.

        Runs a float64 copy of the current weights (a reference for tests and checks; the
        trainer scores with its own model). Same convention as `Generation.logprobs`.
        """
        with self._runner.lock:
            if self._reference is None:
                reference: Any = copy.deepcopy(self.model)
                self._reference = reference.to(torch.float64)
            return score_tokens(self._reference, prompt_ids, response_ids, temperature, top_k, top_p)

    # -- the decode loop (worker thread) -------------------------------------------------

    @torch.inference_mode()
    def _run_rows(self, rows: list[Row]) -> list[RowResult]:
        from transformers import DynamicCache

        dev, batch = self.device, len(rows)
        lens = [len(r.prompt) for r in rows]
        width = max(lens)
        ids = torch.full((batch, width), self.pad_id, dtype=torch.long, device=dev)
        mask = torch.zeros((batch, width), dtype=torch.long, device=dev)
        for i, r in enumerate(rows):
            ids[i, width - lens[i] :] = torch.tensor(r.prompt, device=dev)
            mask[i, width - lens[i] :] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)

        temps = torch.tensor([r.sampling.temperature for r in rows], dtype=torch.float32, device=dev)
        top_k = torch.tensor([r.sampling.top_k for r in rows], dtype=torch.long, device=dev)
        top_p = torch.tensor([r.sampling.top_p for r in rows], dtype=torch.float32, device=dev)
        gens = [None if r.seed is None else torch.Generator(dev).manual_seed(r.seed) for r in rows]
        stops = [
            set(r.sampling.stop_token_ids) | (set() if r.sampling.ignore_eos else self.eos_ids) for r in rows
        ]
        out: list[RowResult | None] = [None] * batch
        tokens: list[list[int]] = [[] for _ in rows]
        lps: list[list[float]] = [[] for _ in rows]

        cache = DynamicCache(config=self.model.config)
        logits = self.model(
            input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache, logits_to_keep=1
        ).logits[:, -1]
        while True:
            proc = processed_logits(logits.float(), temps, top_k, top_p)
            nxt = sample_rows(proc, temps == 0, gens)
            chosen = proc.log_softmax(-1).gather(1, nxt.unsqueeze(1)).squeeze(1)
            for i, (t, lp) in enumerate(zip(nxt.tolist(), chosen.tolist(), strict=True)):
                if out[i] is not None:
                    continue
                tokens[i].append(t)
                lps[i].append(lp)
                if t in stops[i]:
                    out[i] = RowResult(tokens[i], lps[i], "stop")
                elif len(tokens[i]) >= rows[i].sampling.max_new_tokens:
                    out[i] = RowResult(tokens[i], lps[i], "length")
            if all(o is not None for o in out):
                return [o for o in out if o is not None]
            mask = torch.cat([mask, mask.new_ones((batch, 1))], dim=1)
            pos = pos[:, -1:] + 1
            logits = self.model(
                input_ids=nxt.unsqueeze(1), attention_mask=mask, position_ids=pos, past_key_values=cache
            ).logits[:, -1]
