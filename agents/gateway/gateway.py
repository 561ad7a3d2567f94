"""The gateway's core: an OpenAI-style call in, one engine call, the call recorded.

    gw = Gateway(engine, tokenizer, GatewayConfig(tool_parser="hermes"))
    eid = gw.open_episode(task_id="t1")          # the trainer opens the episode ...
    # ... the harness calls base_url=http://host:port/e/<eid>/v1 with the openai client ...
    trajectories = gw.end_episode(eid, reward=1.0)   # ... and the trainer takes its segments

`app.py` puts this behind HTTP (FastAPI); see docs/gateway.md.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from arborl.envs.parsers import get_parser

from ..engines import EngineError, Generation, InferenceEngine, SamplingParams
from ..trajectory import Trajectory
from ..vision import ImageEncoder, ImageInputs, expand_placeholders, is_processor
from .episodes import Call, Episode, EpisodeStore, Segment
from .errors import BadRequest, EngineFailed
from .prompts import (
    completion_text,
    decode,
    encode,
    extend_decoded,
    parse_reply,
    render_chat,
    reply_key,
    splice,
    template_messages,
)
from .schema import ChatRequest, CompletionRequest


class GatewayConfig(BaseModel):
    """How the gateway serves its engine."""

    model_config = ConfigDict(extra="forbid")

    model_name: str = Field("arborl", description="the model name it answers with (any `model` is accepted)")
    tool_parser: str = Field("hermes", description="the model's native tool-call format (envs/parsers.py)")
    max_new_tokens: int = Field(512, ge=1, description="response cap when a request sets no max_tokens")
    max_context_tokens: int | None = Field(
        None, ge=2, description="prompt + max_tokens beyond this is refused (context_length_exceeded)"
    )
    max_request_bytes: int = Field(
        32 * 2**20, ge=1024, description="larger request bodies are refused (413) before they are read"
    )
    admin_token: str | None = Field(
        None, description="bearer token of the /admin routes (open/end episodes); None: no admin routes"
    )


@dataclass
class Result:
    """One served call: what was sampled and what the harness is told."""

    prompt_ids: list[int]
    gen: Generation
    text: str  # the model's text, without its stop token
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    id: str = ""
    created: int = 0

    @property
    def finish_reason(self) -> str:
        if self.tool_calls:
            return "tool_calls"
        return self.gen.finish_reason


class Gateway:
    """Serves an engine to harnesses and records their episodes (see `episodes`)."""

    def __init__(self, engine: InferenceEngine, tokenizer: Any, config: GatewayConfig | None = None) -> None:
        """`tokenizer`: the model's tokenizer, or a vision-language model's processor (then
        requests may carry image_url parts, recorded with the calls)."""
        self.engine = engine
        self.vision = ImageEncoder(tokenizer) if is_processor(tokenizer) else None
        tokenizer = tokenizer.tokenizer if self.vision is not None else tokenizer
        self.tokenizer = tokenizer
        self.config = config or GatewayConfig()
        self.parser = get_parser(self.config.tool_parser)
        self.store = EpisodeStore()
        # len(tokenizer) rebuilds the vocabulary with its added tokens on every call
        self.vocab_size = len(tokenizer)

    # ---- episodes (the trainer's side) ---------------------------------------------------
    def open_episode(self, episode_id: str | None = None, *, task_id: str = "", group_id: str = "") -> str:
        """Open an episode; returns its id (a fresh unguessable one unless given)."""
        return self.store.open(episode_id, task_id=task_id, group_id=group_id).id

    def end_episode(self, episode_id: str, reward: float) -> list[Trajectory]:
        """Close the episode to further calls; its segments, each with `reward`."""
        return self.store.end(episode_id, reward)

    def trajectories(self, episode_id: str) -> list[Trajectory]:
        """The segments recorded so far of an open episode."""
        return self.store.snapshot(episode_id)

    # ---- calls (the harness's side) ------------------------------------------------------
    async def chat(self, episode_id: str, req: ChatRequest) -> Result:
        """One ``/v1/chat/completions`` call."""
        replies = self.store.with_episode(episode_id, lambda ep: dict(ep.replies))
        sees = self.vision is not None and getattr(self.engine, "accepts_images", False)
        messages = template_messages(req.messages, replies, images=sees)
        text = render_chat(self.tokenizer, messages, req.tools)
        text, images = self._images(text, messages)
        prompt = self.store.with_episode(episode_id, lambda ep: splice(self.tokenizer, text, ep.segments))
        res = await self._generate(episode_id, prompt, req.sampling(self.config.max_new_tokens), images)
        parser = self.parser if req.parse_tools else None
        res.content, res.reasoning, calls = parse_reply(res.text, parser, req.tools)
        res.tool_calls = calls or None
        keys = {reply_key(res.content, res.tool_calls), reply_key(res.content, res.tool_calls, res.reasoning)}
        self.store.with_episode(episode_id, lambda ep: ep.replies.update(dict.fromkeys(keys, res.text)))
        return res

    async def complete(self, episode_id: str, req: CompletionRequest) -> Result:
        """One ``/v1/completions`` call (a text prompt is spliced like a chat one)."""
        if isinstance(req.prompt, str):
            text = req.prompt
            prompt = self.store.with_episode(episode_id, lambda ep: splice(self.tokenizer, text, ep.segments))
        else:
            prompt = [int(t) for t in req.prompt if isinstance(t, int)]
            self.store.get(episode_id)
        res = await self._generate(episode_id, prompt, req.sampling(self.config.max_new_tokens))
        res.content = res.text
        return res

    def _images(self, text: str, messages: list[dict[str, Any]]) -> tuple[str, ImageInputs | None]:
        """The rendered text with each image's placeholder expanded, and the images processed."""
        if self.vision is None or not any(isinstance(m.get("content"), list) for m in messages):
            return text, None  # (template_messages refused image parts a text model was sent)
        return expand_placeholders(self.vision, text, messages)

    async def _generate(
        self, episode_id: str, prompt: list[int], sampling: SamplingParams, images: ImageInputs | None = None
    ) -> Result:
        self._check_length(prompt, sampling)
        vocab = self.vocab_size
        if prompt and (min(prompt) < 0 or max(prompt) >= vocab):
            raise BadRequest(f"the prompt has token ids outside [0, {vocab})", param="prompt")
        try:
            extra = {"images": [images]} if images is not None else {}  # text engines take none
            (gen,) = await self.engine.generate([prompt], sampling, **extra)
        except EngineError as e:
            raise EngineFailed(f"the engine failed: {e}") from e
        call = Call(
            prompt_ids=prompt,
            completion_ids=list(gen.token_ids),
            logprobs=list(gen.logprobs),
            versions=gen.versions,
            finish_reason=gen.finish_reason,
            latency_s=gen.latency_s,
            images=images,
        )

        def tail_text(seg: Segment | None) -> str:
            if seg is None:  # a new segment: its whole text
                return decode(self.tokenizer, prompt + call.completion_ids)
            tail = seg.tail
            return extend_decoded(
                self.tokenizer, seg.tail_text, tail, prompt[len(tail) :] + call.completion_ids
            )

        def record(ep: Episode) -> None:
            ep.record(call, tail_text)

        self.store.with_episode(episode_id, record)  # an episode ended meanwhile: EpisodeEnded
        return Result(
            prompt_ids=prompt,
            gen=gen,
            text=completion_text(self.tokenizer, gen.token_ids, gen.finish_reason),
            id=uuid.uuid4().hex,
            created=int(time.time()),
        )

    def _check_length(self, prompt: list[int], sampling: SamplingParams) -> None:
        limit = self.config.max_context_tokens
        if limit is not None and len(prompt) + sampling.max_new_tokens > limit:
            raise BadRequest(
                f"this model's maximum context length is {limit} tokens; the messages are "
                f"{len(prompt)} tokens and max_tokens is {sampling.max_new_tokens}. Shorten the "
                "history or lower max_tokens.",
                param="messages",
                code="context_length_exceeded",
            )

    def token_text(self, token_id: int) -> str:
        """One token as text (for log-prob entries)."""
        return decode(self.tokenizer, [token_id])

    def encode(self, text: str) -> list[int]:
        return encode(self.tokenizer, text)
