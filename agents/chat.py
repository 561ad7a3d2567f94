"""Append-only tokenized conversations: render once, then only ever append ids.

The peers' most common RL bug for multi-turn agents is re-tokenizing the history each turn:
the ids the trainer sees then differ from the ids the engine sampled and consumed (BPE
merges across turn boundaries, templates that rewrite earlier turns). Here the prompt is
rendered once; after that:

- the model's sampled ids are appended exactly as generated (loss mask 1);
- what the environment says is appended as the chat template's rendering of only the new
  messages plus the next generation prompt (loss mask 0). That delta is computed against a
  fixed dummy conversation, so the real history is never re-rendered or re-tokenized;
- the end-of-turn delimiter the template puts after the model's EOS (e.g. "\\n" after
  `<|im_end|>`) is part of that environment delta; a response cut off by the length limit
  gets the whole delimiter, EOS included.

`check_append_only(tokenizer)` probes a template for the property this relies on (rendering
n+1 messages extends the rendering of n) and returns what breaks it, e.g. templates that drop
earlier reasoning blocks. Such templates still train on exactly the tokens the model saw,
but inference with `apply_chat_template` on the full history would show the model a
different context, so the agent reports it instead of silently training on drift.

Images (a vision-language policy, `vision`): the rendered text of the opening messages, and
of each appended delta, goes through the model's processor once with the images of those
messages (`arborl.agents.vision.ImageEncoder`): each placeholder expanded into the image's
tokens, and the pixels kept beside the ids (`prompt_images`, `last_images`, `images()`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .vision import ImageEncoder, ImageInputs

Message = dict[str, Any]

_BASE: list[Message] = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U"},
    {"role": "assistant", "content": "A"},
]


class ChatTemplateError(ValueError):
    """The chat template cannot be used append-only (see `check_append_only`)."""


def _render(tokenizer: Any, messages: Sequence[Message], tools: Sequence[dict] | None, gen: bool) -> str:
    return str(
        tokenizer.apply_chat_template(
            list(messages),
            tools=list(tools) if tools else None,
            tokenize=False,
            add_generation_prompt=gen,
        )
    )


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def check_append_only(tokenizer: Any, tools: Sequence[dict] | None = None) -> list[str]:
    """Problems that stop this template from being used append-only ([] means fine)."""
    probe: list[Message] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Compute 2+3."},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\nCalling the tool."},
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": "<think>\ndone\n</think>\nIt is 5."},
        {"role": "user", "content": "Thanks."},
    ]
    problems = []
    for k in range(2, len(probe)):
        before, after = (
            _render(tokenizer, probe[:k], tools, False),
            _render(tokenizer, probe[: k + 1], tools, False),
        )
        if not after.startswith(before):
            problems.append(
                f"rendering {k + 1} messages rewrites the first {k} (message {k} is "
                f"{probe[k]['role']!r}): earlier turns change as the conversation grows"
            )
        if probe[k]["role"] == "assistant":
            prompt = _render(tokenizer, probe[:k], tools, True)
            if not after.startswith(prompt + probe[k]["content"]):
                problems.append(
                    f"assistant message {k} is not rendered as the generation prompt "
                    "followed by the content the model would have produced"
                )
    return problems


@dataclass
class TokenizedChat:
    """A conversation as token ids, grown only by appending.

    >>> chat = TokenizedChat.start(tok, [{"role": "user", "content": "hi"}])
    >>> chat.append_response(sampled_ids)                          # model tokens, mask 1
    >>> obs_ids = chat.append_messages([{"role": "tool", "content": "5"}])  # env tokens, mask 0
    """

    tokenizer: Any
    tools: list[dict] | None
    ids: list[int]
    messages: list[Message] = field(default_factory=list)
    closing: str = ""  # what the template puts after an assistant turn's content
    last_response: list[int] = field(default_factory=list)
    awaiting_response: bool = True
    vision: ImageEncoder | None = None  # a vision-language policy's processor
    prompt_images: ImageInputs | None = None  # the images of the opening messages
    last_images: ImageInputs | None = None  # the images of the last append_messages
    appended_images: list[ImageInputs] = field(default_factory=list)  # every append's, in order

    def images(self) -> ImageInputs | None:
        """Every image of `ids`, in order."""
        return ImageInputs.concat([self.prompt_images, *self.appended_images])

    def _encode(self, text: str, messages: Sequence[Message]) -> tuple[list[int], ImageInputs | None]:
        if self.vision is None:
            return _encode(self.tokenizer, text), None
        return self.vision.encode(text, messages)

    @classmethod
    def start(
        cls,
        tokenizer: Any,
        messages: Sequence[Message],
        tools: Sequence[dict] | None = None,
        strict: bool = False,
        vision: ImageEncoder | None = None,
    ) -> TokenizedChat:
        """Render the opening messages once, ending with the generation prompt.

        With `strict`, a template that fails `check_append_only` raises ChatTemplateError.
        With `vision`, images in the messages are processed with the ids (module doc).
        """
        if strict and (problems := check_append_only(tokenizer, tools)):
            raise ChatTemplateError("; ".join(problems))
        full = _render(tokenizer, _BASE, tools, False)
        prompt = _render(tokenizer, _BASE[:-1], tools, True)
        if not full.startswith(prompt + "A"):
            raise ChatTemplateError("the template does not render an assistant turn as prompt + content")
        text = _render(tokenizer, messages, tools, True)
        chat = cls(
            tokenizer, list(tools) if tools else None, [], list(messages), closing=full[len(prompt) + 1 :]
        )
        chat.vision = vision
        chat.ids, chat.prompt_images = chat._encode(text, messages)
        return chat

    def append_response(self, token_ids: Sequence[int]) -> None:
        """Append the engine's sampled ids exactly as they are."""
        if not self.awaiting_response:
            raise RuntimeError("append_messages() must come between two responses")
        self.ids.extend(int(t) for t in token_ids)
        self.messages.append({"role": "assistant", "content": self.tokenizer.decode(list(token_ids))})
        self.awaiting_response = False
        self.last_response = list(token_ids)

    def append_messages(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int]:
        """Append the environment's messages; returns the ids added (loss mask 0).

        The ids are: the rest of the last assistant turn's delimiter, then the template's
        rendering of `messages`, then the next generation prompt.
        """
        if self.awaiting_response:
            raise RuntimeError("append_response() must come first")
        eos = self.tokenizer.eos_token or ""
        last = self.last_response
        ended = bool(last and eos) and self.tokenizer.convert_ids_to_tokens(last[-1]) == eos
        head = self.closing[len(eos) :] if ended and self.closing.startswith(eos) else self.closing
        base = _render(self.tokenizer, _BASE, self.tools, False)
        grown = _render(self.tokenizer, [*_BASE, *messages], self.tools, add_generation_prompt)
        if not grown.startswith(base):
            raise ChatTemplateError(
                "appending messages rewrites earlier turns: the template is not append-only"
            )
        # One encode of delimiter rest + new turns: what tokenizing the full rendering gives here.
        added, self.last_images = self._encode(head + grown[len(base) :], messages)
        if self.last_images is not None:
            self.appended_images.append(self.last_images)
        self.ids.extend(added)
        self.messages.extend(messages)
        self.awaiting_response = True
        return added
