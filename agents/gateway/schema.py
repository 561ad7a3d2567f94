"""Requests the gateway takes: OpenAI's chat and completions bodies, checked.

Fields harnesses commonly send and that change nothing here (``user``, ``metadata``,
``parallel_tool_calls``, ``store``, ...) are accepted and ignored. Fields that would change
what is sampled, which the engine cannot honour (penalties, ``logit_bias``, stop strings,
forced tool choice, ``n > 1``), are refused with a message instead of silently ignored: the
recorded behaviour log-probs must be those of the distribution that was really sampled.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..engines import SamplingParams


class _Sampling(BaseModel):
    """Sampling fields shared by both endpoints (vLLM's extensions included)."""

    model_config = ConfigDict(extra="allow")

    model: str = ""
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1, description="vLLM extension; -1 or 0 disables")
    seed: int | None = Field(None, ge=0)
    n: int = 1
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] = Field(default_factory=list)
    ignore_eos: bool = False
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    return_token_ids: bool = Field(False, description="vLLM extension: answer with the token ids too")

    @model_validator(mode="after")
    def _unsupported(self) -> _Sampling:
        if self.n != 1:
            raise ValueError("n must be 1: the gateway records one sample per call (send n requests)")
        if self.stop:
            raise ValueError(
                "stop strings are not supported: the engine stops on token ids; send stop_token_ids"
            )
        if self.frequency_penalty or self.presence_penalty or self.logit_bias:
            raise ValueError(
                "frequency_penalty, presence_penalty and logit_bias are not supported: the recorded "
                "log-probs must be those of the distribution actually sampled"
            )
        return self

    def sampling(self, default_max_tokens: int) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=max(self.top_k, 0),
            max_new_tokens=self.max_tokens or default_max_tokens,
            stop_token_ids=tuple(self.stop_token_ids),
            ignore_eos=self.ignore_eos,
            seed=self.seed,
        )

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class ChatRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=0, description="only the sampled token's log-prob")
    response_format: dict[str, Any] | None = None

    @field_validator("messages")
    @classmethod
    def _messages(cls, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        roles = {"system", "developer", "user", "assistant", "tool"}
        for i, m in enumerate(messages):
            if m.get("role") not in roles:
                raise ValueError(f"messages[{i}].role must be one of {sorted(roles)}, got {m.get('role')!r}")
        return messages

    @model_validator(mode="after")
    def _chat_unsupported(self) -> ChatRequest:
        if self.tool_choice not in (None, "auto", "none"):
            raise ValueError(
                "tool_choice must be 'auto' or 'none': the gateway does not constrain sampling "
                "to force a tool call"
            )
        if self.response_format and self.response_format.get("type", "text") != "text":
            raise ValueError("response_format other than text is not supported (no constrained decoding)")
        if self.max_completion_tokens and not self.max_tokens:
            self.max_tokens = self.max_completion_tokens
        return self

    @property
    def parse_tools(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"


class CompletionRequest(_Sampling):
    """``POST /v1/completions``: the prompt is text or token ids (vLLM's extension)."""

    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=0, description="0: the sampled token's log-prob")
    echo: Literal[False] = False
    suffix: None = None

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, prompt: Any) -> Any:
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
            if len(prompt) != 1:
                raise ValueError("one prompt per request: the gateway records one call per request")
            prompt = prompt[0]
        if not prompt:
            raise ValueError("the prompt is empty")
        return prompt
