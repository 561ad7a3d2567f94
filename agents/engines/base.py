"""The inference-engine contract: token ids in, token ids and behaviour log-probs out.

Every backend (transformers, in-process vLLM, an OpenAI-compatible server) implements
`InferenceEngine`. Nothing here sees text: prompts are token ids, responses are the
sampled token ids exactly as the engine produced them, so the trainer scores the very
ids the policy acted on (no re-tokenization anywhere).

Log-prob convention (`Generation.logprobs`)
-------------------------------------------
For each sampled token ``y_t`` the engine reports the log-probability of ``y_t`` under the
distribution it was actually drawn from::

    z_t      = logits(prompt + y_<t)                 # float32, the model's raw next-token logits
    z_t'     = top_p(top_k(z_t / temperature))       # filtered tokens set to -inf
    logp_t   = log_softmax(z_t')[y_t]

- With ``top_k=0`` and ``top_p=1`` (the RL default) this is exactly
  ``log_softmax(logits / temperature)[y_t]``: what verl's ``compute_log_prob`` (and
  `arborl.agents.engines.scoring.score_tokens`) computes for the trainer at the same
  temperature, so ``behavior_logprobs`` and the trainer's old log-probs agree up to
  floating-point noise.
- With top-k / top-p active, the filtered set is renormalised, so ``logp_t`` is higher than
  the untruncated log-prob by ``-log(kept probability mass)``. This is the true behaviour
  policy (what importance ratios need) and is what vLLM reports with
  ``logprobs_mode="processed_logprobs"`` (verl's rollout default). `score_tokens` takes the
  same ``top_k``/``top_p`` arguments to reproduce it.
- Top-k keeps every token whose scaled logit is >= the k-th largest (ties kept); top-p
  then sorts ascending, drops tokens while the cumulative probability is <= ``1 - top_p``,
  and always keeps the most likely one (vLLM's and transformers' rule).
- ``temperature == 0`` is greedy decoding: ``y_t = argmax z_t``, top-k/top-p are ignored and
  ``logp_t = log_softmax(z_t)[y_t]`` (temperature 1), as vLLM reports it.

Sampling randomness: with ``seed`` set, sample ``j`` of a prompt draws its noise from a
generator seeded with ``seed + j`` (vLLM's rule for ``n > 1``), one exponential-race draw
per step, so results do not depend on how requests are batched.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    from .adapters import LoraAdapter

FinishReason = Literal["stop", "length"]
WeightsSource = Mapping[str, torch.Tensor] | str | Path


class EngineError(RuntimeError):
    """An inference engine failed; the message says what to check next."""


class EngineUnavailable(EngineError):
    """The engine (e.g. an OpenAI-compatible server) cannot be reached after retries."""


class SamplingParams(BaseModel):
    """How to sample. Defaults are the RL defaults (untruncated sampling at temperature 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(1.0, ge=0.0, description="0 means greedy (argmax)")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus mass to keep; 1 disables")
    top_k: int = Field(0, ge=0, description="keep the k most likely tokens; 0 disables")
    max_new_tokens: int = Field(256, ge=1, description="response length cap (finish 'length')")
    stop_token_ids: tuple[int, ...] = Field((), description="extra ids that end a response")
    ignore_eos: bool = Field(False, description="do not stop at the model's EOS ids")
    seed: int | None = Field(None, description="per-request seed; sample j uses seed + j")
    n: int = Field(1, ge=1, description="samples per prompt")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.seed is not None and self.seed < 0:
            raise ValueError("seed must be >= 0")
        return self

    @property
    def greedy(self) -> bool:
        """True when decoding is argmax (temperature 0)."""
        return self.temperature == 0.0

    def row_seed(self, sample_index: int) -> int | None:
        """Seed of sample `sample_index` of a prompt (None: unseeded)."""
        return None if self.seed is None else self.seed + sample_index


class Generation(BaseModel):
    """One sampled response.

    ``logprobs[i]`` is the behaviour log-prob of ``token_ids[i]`` (see the module docstring).
    A response that ends on a stop id (EOS or `SamplingParams.stop_token_ids`) includes that
    id as its last token: the policy sampled it, so the trainer trains on it.
    """

    model_config = ConfigDict(extra="forbid")

    prompt_index: int = Field(description="index of the prompt in the `generate` call")
    sample_index: int = Field(0, description="0..n-1 among the samples of that prompt")
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    num_prompt_tokens: int
    latency_s: float = Field(0.0, description="wall time from the generate call to this result")
    weights_version: int = Field(
        0, description="number of `update_weights` calls applied before its first token was sampled"
    )
    token_versions: list[int] = Field(
        default_factory=list,
        description="weights version per token, where an update landed mid-response (empty: all weights_version)",
    )
    entropies: list[float] = Field(
        default_factory=list,
        description="entropy (nats) of the distribution each token was sampled from (after "
        "temperature / top-k / top-p); empty where the engine does not report it",
    )

    @model_validator(mode="after")
    def _same_length(self) -> Self:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(f"{len(self.token_ids)} token ids but {len(self.logprobs)} log-probs")
        if self.token_versions and len(self.token_versions) != len(self.token_ids):
            raise ValueError(f"{len(self.token_ids)} token ids but {len(self.token_versions)} token versions")
        if self.entropies and len(self.entropies) != len(self.token_ids):
            raise ValueError(f"{len(self.token_ids)} token ids but {len(self.entropies)} entropies")
        return self

    @property
    def versions(self) -> list[int]:
        """The weights version of each token."""
        return list(self.token_versions) or [self.weights_version] * len(self.token_ids)


@dataclass(frozen=True)
class TrainerPolicy:
    """What a trainer hands the engine it generates with (`InferenceEngine.for_trainer`)."""

    #: the model directory: tokenizer, config, and the weights the run started from
    base: str
    #: the directory of the weights the run starts generating with (`base`, or a resumed
    #: run's latest checkpoint); later weights arrive through `update_weights`
    weights: str
    #: the learner's weights dtype ("float32", "bfloat16", "float16")
    dtype: str
    #: the learner's torch device ("cpu", "cuda:0")
    device: str
    #: the learner's own torch module, holding `weights`: an engine in this process may copy
    #: it rather than load the weights again (it must not share it: the learner updates it)
    module: Any = None
    #: LoRA: the largest adapter rank the engine will be sent (0: full weights are pushed)
    lora_rank: int = 0
    #: LoRA: the adapter directory the run starts generating with over `weights` (a resumed
    #: run's checkpoint; None: none yet, the base as it is). An in-process `module` already
    #: holds it; later adapters arrive through `update_adapter`
    adapter: str | None = None


class InferenceEngine(abc.ABC):
    """A policy that samples token ids: batched, async, with a weight-update hook.

    Use as an async context manager (``async with make_engine(cfg) as engine:``) or call
    `close()`; engines hold processes, threads or connections that must be released.
    """

    #: the registry name of the backend ("transformers", "vllm", "openai")
    kind: str = ""
    #: whether `generate` takes ``images=`` (one `arborl.agents.vision.ImageInputs` or None per
    #: prompt, the images whose placeholder tokens the prompt holds): a vision-language model
    accepts_images: bool = False

    @abc.abstractmethod
    async def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """Sample `sampling.n` responses per prompt.

        Returns ``len(prompts) * n`` generations in prompt-major order
        ``[p0s0, p0s1, ..., p1s0, ...]`` (``prompt_index``/``sample_index`` say which).
        Concurrent calls are allowed; backends may batch them together.
        """

    @abc.abstractmethod
    async def update_weights(self, weights: WeightsSource) -> None:
        """Load new policy weights: a state dict (names as in the HF checkpoint) or the path
        of a directory holding ``*.safetensors`` in HF layout. Generations started after
        this returns use the new weights; cached prefixes computed with the old ones are dropped.
        """

    async def update_adapter(self, adapter: LoraAdapter) -> None:
        """Generate with `adapter` (a LoRA adapter, `adapters.LoraAdapter`) over the base
        weights from now on, replacing any earlier adapter; what a LoRA run sends after each
        update instead of the full weights. Engines that cannot apply one refuse."""
        raise EngineError(
            f"the {self.kind or type(self).__name__} engine cannot take LoRA adapters: use "
            "model.engine=transformers or vllm, or train full weights (model.lora.r=0)"
        )

    @abc.abstractmethod
    async def close(self) -> None:
        """Release processes, threads and connections. Idempotent."""

    @classmethod
    def for_trainer(cls, policy: TrainerPolicy, options: Mapping[str, Any]) -> InferenceEngine:
        """This engine generating with a trainer's policy (`arborl train model.engine=<kind>`),
        `options` being more fields of its config (`model.engine_options`). An engine that can
        take the learner's weight pushes implements it."""
        raise EngineError(
            f"the {cls.kind or cls.__name__} engine cannot generate for arborl's trainer "
            "(it has no for_trainer): pick another model.engine"
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def check_prompts(prompts: Sequence[Sequence[int]], vocab_size: int | None = None) -> list[list[int]]:
    """Validate prompts as non-empty lists of in-range ids; return them as plain lists."""
    out = []
    for i, p in enumerate(prompts):
        ids = [int(t) for t in p]
        if not ids:
            raise ValueError(f"prompt {i} is empty: an engine needs at least one token to condition on")
        if vocab_size is not None and (min(ids) < 0 or max(ids) >= vocab_size):
            raise ValueError(f"prompt {i} has ids outside [0, {vocab_size})")
        out.append(ids)
    return out


def elapsed(start: float) -> float:
    """Seconds since `start` (a `time.perf_counter()` value)."""
    return time.perf_counter() - start
