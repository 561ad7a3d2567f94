"""Transformers engine: the CPU default, loaded with the real `from_pretrained(path)`.

A manual decode loop (not `model.generate`) so that sampling and log-probs follow the
convention in `base` exactly, with per-row parameters and per-row seeded generators, and
with continuous batching (`batching.StepRunner`): rows join and leave the running batch
between decode steps. The batch is a left-padded KV cache::

    KV cache (left-padded)        attention_mask     next position
    | 0 0 s s s a b |             | 0 0 1 1 1 1 1 |  5
    | s s s d e f g |             | 1 1 1 1 1 1 1 |  7      (s: the rows' common prefix)

Rows are prefilled without padding and without computing a shared prefix twice: the rows
joining the batch are walked as a prefix tree (one forward pass per edge), starting from the
longest prefix they share with a row prefilled recently under the same weights (the system
prompt and tool list, the group's task, or the episode's previous turn: a prefix of a KV
cache is the cache of the prefix). The per-row caches are then laid into the padded one. A
multi-turn agent's prompts are long, alike and of mixed lengths, so this saves most of the
engine's work. Finished rows leave the cache at once, and columns no row needs are cut.
Decoding appends each step's keys and values in place, into spare columns of the cache's
buffers (`hf_cache.RoomyLayer`), and attention reads grouped key/value heads without
repeating them (`attn_implementation="sdpa_gqa"`, `arborl.kernels.attention`).

A weight update may land between two decode steps: the batch then prefills every row again
(prompt + tokens so far) with the new weights, so each token is sampled by exactly the
policy version it records, with that policy's log-prob.

A vision-language model (`accepts_images`) takes each prompt's images with it
(``generate(prompts, sampling, images=[...])``); such a prompt is prefilled alone, with its
pixels and M-RoPE positions, and decoded in the same batch (`hf_vision`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..vision import NEVER_LOGIT
from .adapters import LoraAdapter, apply_adapter, load_with_adapter
from .base import (
    EngineError,
    Generation,
    InferenceEngine,
    SamplingParams,
    TrainerPolicy,
    WeightsSource,
    check_prompts,
)
from .batching import Row, RowResult, StepRunner, expand_rows
from .config import HFEngineConfig
from .hf_cache import stack_left
from .hf_vision import empty_cache, load_model, prefill_with_images, score_with_images, text_config
from .scoring import processed_logits, sample_rows, score_tokens
from .weights import load_state_dict_from_path

_Kv = list[tuple[torch.Tensor, torch.Tensor]]  # a KV cache's keys and values, per layer
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
        """Load `config.model` with `from_pretrained`, or wrap an already loaded `model` (which
        is switched to `config.attn_implementation`)."""
        from arborl.kernels.attention import register_sdpa_gqa

        from ..vision import has_vision, vision_token_ids

        register_sdpa_gqa()
        self.config = config
        load = lambda path: load_model(path, _DTYPES[config.dtype], config.attn_implementation)  # noqa: E731
        self.model: Any = model or load_with_adapter(config.model, load)  # a model, or base + adapter
        if self.model.config._attn_implementation != config.attn_implementation:
            self.model.set_attn_implementation(config.attn_implementation)
        self.model.to(config.device).eval()
        self.device = torch.device(config.device)
        self.eos_ids = _eos_ids(self.model)
        self.accepts_images = has_vision(self.model)
        #: ids taken out of every distribution the engine samples or scores (vision.vision_token_ids)
        self.never_ids = vision_token_ids(self.model)
        self.vocab_size = int(text_config(self.model).vocab_size)
        self.max_positions = int(getattr(text_config(self.model), "max_position_embeddings", 1 << 30))
        #: torch threads of the decode thread (thread-local; None: torch's default), followed
        #: from one decode step to the next.
        self.threads = config.torch_threads
        self._runner = StepRunner(lambda: _DecodeBatch(self), config.max_batch_size)
        self._reference: Any | None = None  # float64 copy for `score`, rebuilt after updates
        # Rows prefilled lately under weights `_recent_version`, with their KV (decode thread only).
        self._recent: list[tuple[list[int], _Kv]] = []
        self._recent_version = -1

    @classmethod
    def for_trainer(cls, policy: TrainerPolicy, options: Mapping[str, Any]) -> HFEngine:
        """A copy of the learner's module on its device and dtype (pushes copy in place)."""
        config = HFEngineConfig(model=policy.base, dtype=policy.dtype, device=policy.device, **options)
        return cls(config, model=copy.deepcopy(policy.module) if policy.module is not None else None)

    @property
    def weights_version(self) -> int:
        """How many weight updates have been applied."""
        return self._runner.weights_version

    async def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, images: Sequence[Any] | None = None
    ) -> list[Generation]:
        import time

        start = time.perf_counter()
        checked = check_prompts(prompts, self.vocab_size)
        longest = max((len(p) for p in checked), default=0)
        if longest + sampling.max_new_tokens > self.max_positions:
            raise ValueError(
                f"prompt ({longest}) + max_new_tokens ({sampling.max_new_tokens}) exceeds the "
                f"model's {self.max_positions} positions"
            )
        if images is not None and any(i is not None for i in images) and not self.accepts_images:
            raise EngineError(f"{self.config.model} has no vision tower: it cannot take images")
        return await self._runner.generate(expand_rows(checked, sampling, images), start)

    async def update_weights(self, weights: WeightsSource) -> None:
        """Copy `weights` into the model's parameters in place (same names as `state_dict()`)."""
        state = load_state_dict_from_path(weights) if isinstance(weights, str | Path) else dict(weights)
        await self._runner.exclusive(lambda: self._load(state))

    async def update_adapter(self, adapter: LoraAdapter) -> None:
        """Set the model's LoRA layers to `adapter` in place (injected the first time), between
        two decode steps; the base weights stay as they are."""
        await self._runner.exclusive(lambda: self._apply(adapter))

    def _apply(self, adapter: LoraAdapter) -> None:
        apply_adapter(self.model, adapter)
        self._reference = None

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
        await self._runner.close()
        self._reference = None

    def score(
        self,
        prompt_ids: Sequence[int],
        response_ids: Sequence[int],
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        images: Any = None,
    ) -> torch.Tensor:
        """Teacher-forced float64 log-probs of `response_ids` after `prompt_ids` (and its
        `images`, an `ImageInputs`).

        Runs a float64 copy of the current weights (a reference for tests and checks; the
        trainer scores with its own model). Same convention as `Generation.logprobs`.
        """
        with self._runner.lock:
            if self._reference is None:
                reference: Any = copy.deepcopy(self.model)
                self._reference = reference.to(torch.float64)
            if images is not None:
                return score_with_images(
                    self._reference, prompt_ids, response_ids, images, temperature, top_k, top_p
                )
            return score_tokens(self._reference, prompt_ids, response_ids, temperature, top_k, top_p)

    # -- the decode loop (the runner's thread) --------------------------------------------

    @torch.inference_mode()
    def prefill(
        self, seqs: list[list[int]], images: Sequence[Any] | None = None
    ) -> tuple[_Kv, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Left-padded KV per layer ``[B, heads, W, dim]``, attention mask ``[B, W]``,
        next-token logits ``[B, V]`` and rope deltas ``[B]`` of `seqs`, computed without
        padding tokens; text rows with every shared prefix computed once (a walk down their
        prefix tree), rows with `images` each alone (`hf_vision`)."""
        shown = list(images) if images is not None else [None] * len(seqs)
        text = [i for i, im in enumerate(shown) if im is None]
        rows: list[_Kv] = [[] for _ in seqs]
        logits: list[torch.Tensor] = [torch.empty(0)] * len(seqs)
        deltas = [0] * len(seqs)
        if text:
            text_rows, text_logits = self._prefill_text([seqs[i] for i in text])
            for j, i in enumerate(text):
                rows[i], logits[i] = text_rows[j], text_logits[j]
        for i, im in enumerate(shown):
            if im is not None:
                rows[i], logits[i], deltas[i] = prefill_with_images(self.model, seqs[i], im)
        ones = [torch.ones((1, len(s)), dtype=torch.long, device=self.device) for s in seqs]
        kv, mask = stack_left(rows, ones)
        return kv, mask, self._never(torch.stack(logits)), torch.tensor(deltas, device=self.device)

    def _never(self, logits: torch.Tensor) -> torch.Tensor:
        """`logits` [B, V] with the vision placeholder ids taken out (in place)."""
        if self.never_ids:
            logits[:, self.never_ids] += NEVER_LOGIT
        return logits

    def _prefill_text(self, seqs: list[list[int]]) -> tuple[list[_Kv], list[torch.Tensor]]:
        """Per-row KV and next-token logits of text rows, down their prefix tree."""
        rows: list[_Kv] = [[] for _ in seqs]
        logits: list[torch.Tensor] = [torch.empty(0)] * len(seqs)

        def extend(kv: _Kv, tokens: list[int], at: int) -> tuple[_Kv, torch.Tensor]:
            cache = self._cache(kv)
            out = self.model(
                input_ids=torch.tensor([tokens], device=self.device),
                position_ids=torch.arange(at, at + len(tokens), device=self.device).unsqueeze(0),
                past_key_values=cache,
                logits_to_keep=1,
            )
            return [(layer.keys, layer.values) for layer in cache.layers], out.logits[0, -1]

        def walk(idx: list[int], kv: _Kv, at: int, last: torch.Tensor) -> None:
            """`kv`: the cache of ``seqs[i][:at]``, the same for every i in `idx`."""
            first = seqs[idx[0]]
            shared = min(_shared_len(first, seqs[i], len(seqs[i])) for i in idx)
            if shared > at:
                kv, last = extend(kv, first[at:shared], at)
            branches: dict[int, list[int]] = {}
            for i in idx:
                if len(seqs[i]) == shared:
                    rows[i], logits[i] = kv, last
                else:
                    branches.setdefault(seqs[i][shared], []).append(i)
            for branch in branches.values():
                walk(branch, kv, shared, last)

        if any(not s for s in seqs):
            raise EngineError("empty prompt")
        start, base = self._cached_prefix(seqs)
        walk(list(range(len(seqs))), base, start, torch.empty(0))
        self._recent = (self._recent + [(s, kv) for s, kv in zip(seqs, rows, strict=True)])[-32:]
        return rows, logits

    def _cached_prefix(self, seqs: list[list[int]]) -> tuple[int, _Kv]:
        """The longest start of every row in `seqs` that a recently prefilled row shares, and
        its KV (a prefix of a cache is the cache of the prefix). Recent rows are those of the
        current weights: the system prompt and tool list, a group's task, or the row's own
        previous turn are computed once per weights version."""
        version = self._runner.weights_version
        if self._recent_version != version:
            self._recent, self._recent_version = [], version
        if not self._recent:
            return 0, []

        def common(a: list[int], b: list[int]) -> int:  # a row keeps >= 1 token of its own
            return _shared_len(a, b, len(b) - 1)

        seq, kv = max(self._recent, key=lambda e: sum(common(e[0], s) for s in seqs))
        start = min(common(seq, s) for s in seqs)
        return start, [(k[:, :, :start], v[:, :, :start]) for k, v in kv] if start else []

    def _cache(self, kv: _Kv) -> Any:
        """A transformers cache holding `kv` (per layer) without copying it; the model's
        update concatenates onto it, so `kv` itself stays as it is (a shared prefix's)."""
        from transformers.cache_utils import DynamicLayer

        cache = empty_cache(self.model)
        for i, (k, v) in enumerate(kv):
            if i == len(cache.layers):
                cache.layers.append(DynamicLayer())
            layer = cache.layers[i]
            layer.lazy_initialization(k, v)
            layer.keys, layer.values = k, v
        return cache

    @torch.inference_mode()
    def decode(
        self, layers: list[Any], mask: torch.Tensor, tokens: torch.Tensor, deltas: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step: `tokens` [B] appended to the cache `layers` (`hf_cache.RoomyLayer`s,
        written in place); the new mask and logits. `deltas` [B]: each row's rope delta."""
        from transformers.cache_utils import Cache

        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
        logits = self.model(
            input_ids=tokens.unsqueeze(1),
            attention_mask=mask,
            position_ids=mask.sum(-1, keepdim=True) - 1 + (0 if deltas is None else deltas.unsqueeze(1)),
            past_key_values=Cache(layers=layers),
        ).logits[:, -1]
        return mask, self._never(logits)


@dataclass(eq=False)
class _Slot:
    """One row in the running batch."""

    row: Row
    key: Any
    stops: set[int]
    generator: torch.Generator | None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)


def _shared_len(a: list[int], b: list[int], limit: int) -> int:
    """Length of the common start of `a` and `b`, at most `limit` (bisects on slice
    equality, which Python compares in C)."""
    lo, hi = 0, min(len(a), len(b), limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if a[:mid] == b[:mid] else (lo, mid - 1)
    return lo


class _DecodeBatch:
    """The rows `HFEngine` decodes together (a `batching.StepBatch`)."""

    def __init__(self, engine: HFEngine) -> None:
        self.engine = engine
        self.version = -1
        self.slots: list[_Slot] = []
        self._kv: _Kv = []
        self._layers: list[Any] | None = None  # the same cache, as `RoomyLayer`s to decode into
        self.mask = torch.zeros((0, 0), dtype=torch.long)
        self.logits = torch.zeros((0, 0))
        self.deltas = torch.zeros(0, dtype=torch.long)  # each row's rope delta (0: text only)

    def __len__(self) -> int:
        return len(self.slots)

    @property
    def kv(self) -> _Kv:
        """The batch's KV cache per layer ``[B, heads, W, dim]`` (left-padded)."""
        return self._kv if self._layers is None else [(la.keys, la.values) for la in self._layers]

    @kv.setter
    def kv(self, kv: _Kv) -> None:
        self._kv, self._layers = kv, None

    def _threads(self) -> None:
        """Follow `engine.threads` (this runs on the decode thread; a trainer changes it)."""
        if self.engine.threads and torch.get_num_threads() != self.engine.threads:
            torch.set_num_threads(self.engine.threads)

    @torch.inference_mode()
    def admit(self, rows: list[Row], keys: list[Any], version: int) -> None:
        self._threads()
        e = self.engine
        stops = lambda r: set(r.sampling.stop_token_ids) | (set() if r.sampling.ignore_eos else e.eos_ids)  # noqa: E731
        slots = [
            _Slot(r, key, stops(r), None if r.seed is None else torch.Generator(e.device).manual_seed(r.seed))
            for r, key in zip(rows, keys, strict=True)
        ]
        kv, mask, logits, deltas = e.prefill([s.row.prompt for s in slots], [s.row.images for s in slots])
        if self.slots:
            kv, mask = stack_left([self.kv, kv], [self.mask, mask])
            logits, deltas = torch.cat([self.logits, logits]), torch.cat([self.deltas, deltas])
        self.slots, self.deltas = self.slots + slots, deltas
        self.kv, self.mask, self.logits, self.version = kv, mask, logits, version

    @torch.inference_mode()
    def refresh(self, version: int) -> None:
        self.kv, self.mask, self.logits, self.deltas = self.engine.prefill(
            [s.row.prompt + s.tokens for s in self.slots], [s.row.images for s in self.slots]
        )
        self.version = version

    @torch.inference_mode()
    def retain(self, keep: Callable[[Any], bool]) -> None:
        self._select([i for i, s in enumerate(self.slots) if keep(s.key)])

    def _select(self, idx: list[int]) -> None:
        if len(idx) == len(self.slots):
            return
        self.slots = [self.slots[i] for i in idx]
        if not idx:
            self.kv, self.mask, self.logits, self.deltas = [], self.mask[:0], self.logits[:0], self.deltas[:0]
            return
        at = torch.tensor(idx, device=self.mask.device)
        mask = self.mask[at]
        first = int((mask.sum(0) > 0).nonzero()[0])  # columns that are padding in every row left: cut
        from .hf_cache import RoomyLayer

        self.mask = mask[:, first:]
        self._layers = [RoomyLayer.gather(k, v, at, first) for k, v in self.kv]  # one copy, with room
        self.logits, self.deltas = self.logits[at], self.deltas[at]

    @torch.inference_mode()
    def step(self) -> list[tuple[Any, RowResult]]:
        self._threads()
        dev, rows = self.engine.device, [s.row for s in self.slots]
        temps = torch.tensor([r.sampling.temperature for r in rows], dtype=torch.float32, device=dev)
        top_k = torch.tensor([r.sampling.top_k for r in rows], dtype=torch.long, device=dev)
        top_p = torch.tensor([r.sampling.top_p for r in rows], dtype=torch.float32, device=dev)
        proc = processed_logits(self.logits.float(), temps, top_k, top_p)
        nxt = sample_rows(proc, temps == 0, [s.generator for s in self.slots])
        logp = proc.log_softmax(-1)
        chosen = logp.gather(1, nxt.unsqueeze(1)).squeeze(1)
        # The entropy of the distribution each token was drawn from (tree rollouts branch where
        # it is high); entr(0) = 0 where top-k / top-p masked a token out.
        entropy = torch.special.entr(logp.exp()).sum(-1)
        done: list[tuple[Any, RowResult]] = []
        going: list[int] = []
        rows_out = zip(self.slots, nxt.tolist(), chosen.tolist(), entropy.tolist(), strict=True)
        for i, (s, t, lp, ent) in enumerate(rows_out):
            s.tokens.append(t)
            s.logprobs.append(lp)
            s.versions.append(self.version)
            s.entropies.append(ent)
            if t in s.stops:
                done.append((s.key, RowResult(s.tokens, s.logprobs, "stop", s.versions, s.entropies)))
            elif len(s.tokens) >= s.row.sampling.max_new_tokens:
                done.append((s.key, RowResult(s.tokens, s.logprobs, "length", s.versions, s.entropies)))
            else:
                going.append(i)
        self._select(going)
        if going:
            if self._layers is None:
                from .hf_cache import RoomyLayer

                self._layers = [RoomyLayer.of(k, v) for k, v in self._kv]
            deltas = self.deltas if bool(self.deltas.any()) else None
            self.mask, self.logits = self.engine.decode(self._layers, self.mask, nxt[going], deltas)
        return done
