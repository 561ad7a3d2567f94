"""Gymnasium spaces for text in, chat messages out.

action       UnicodeText: the model's raw reply
observation  Sequence(Dict(role=Text, content=UnicodeText)): the chat messages to append,
             e.g. ({"role": "tool", "content": "exit code 0 ..."},)
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from typing import Any

from gymnasium import spaces

#: Longest action / message content the spaces admit (characters).
MAX_TEXT_CHARS = 1 << 20
#: Characters `sample()` draws from: printable ASCII plus a few multi-byte ones.
SAMPLE_CHARSET = string.printable + "éß中文😀→"
ROLES = ("system", "user", "assistant", "tool")

Message = dict[str, str]


class UnicodeText(spaces.Text):
    """Any Python `str` of `min_length`..`max_length` characters.

    Gymnasium's `Text` admits only an explicit charset, and model text is any Unicode: a
    charset of every code point would cost ~100 MB. This space admits every `str` in the
    length range and samples from `SAMPLE_CHARSET` (what `check_env` feeds as actions).
    Flattening to character indices only works for sampled strings.
    """

    def __init__(self, max_length: int = MAX_TEXT_CHARS, *, min_length: int = 0, seed: Any = None) -> None:
        super().__init__(max_length, min_length=min_length, charset=SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object, /) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    __hash__ = None  # type: ignore[assignment]  # mutable RNG inside, like every Space


def message_space() -> spaces.Dict:
    """One chat message: a role name and its content."""
    return spaces.Dict(
        {
            "role": spaces.Text(min_length=1, max_length=16, charset=string.ascii_lowercase + "_"),
            "content": UnicodeText(),
        }
    )


def chat_observation_space() -> spaces.Sequence:
    """A tuple of chat messages (what one reset or step adds to the conversation)."""
    return spaces.Sequence(message_space(), stack=False)


def action_space() -> UnicodeText:
    return UnicodeText()


def clean_text(text: str) -> str:
    """`text` made encodable as UTF-8 (lone surrogates become U+FFFD)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def coerce_action(action: Any) -> str:
    """The model's reply as clean text, whatever the caller passed (bytes, None, ...)."""
    if isinstance(action, str):
        text = action
    elif isinstance(action, bytes | bytearray | memoryview):
        text = bytes(action).decode("utf-8", "replace")
    elif action is None:
        text = ""
    else:
        text = str(action)
    return clean_text(text)[:MAX_TEXT_CHARS]


def to_messages(
    obs: str | Sequence[Mapping[str, Any]] | Mapping[str, Any], role: str = "user"
) -> tuple[Message, ...]:
    """Normalise what an env returns into fresh, in-space message dicts."""
    if isinstance(obs, str):
        items: Sequence[Mapping[str, Any]] = ({"role": role, "content": obs},)
    elif isinstance(obs, Mapping):
        items = (obs,)
    else:
        items = obs
    out = []
    for item in items:
        r = str(item.get("role", role)).lower()
        out.append(
            {
                "role": r if r in ROLES else role,
                "content": _content(item.get("content", "")),
            }
        )
    return tuple(out)


def _content(value: Any) -> Any:
    """A message's content made clean: text, or a list of parts (`arborl.envs.images`) whose
    text is cleaned and whose images are kept as they are."""
    if isinstance(value, list | tuple):
        return [
            {**p, "text": clean_text(str(p.get("text", "")))[:MAX_TEXT_CHARS]}
            if isinstance(p, Mapping) and p.get("type") == "text"
            else dict(p)
            if isinstance(p, Mapping)
            else {"type": "text", "text": clean_text(str(p))}
            for p in value
        ]
    return clean_text(str(value))[:MAX_TEXT_CHARS]


def observation_messages(obs: Any) -> tuple[dict[str, str], ...]:
    """The chat messages of an observation: the observation itself for text envs, its
    ``"messages"`` entry for envs that also return pixels (see `TextEnv.make_observation`)."""
    if isinstance(obs, Mapping):
        return tuple(obs["messages"])
    return tuple(obs)
