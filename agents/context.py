"""What the agent does when an episode outgrows `max_context_tokens`: truncate, slide, summarise.

    truncate        the episode ends (`truncation="context_overflow"`); the default
    sliding_window  the oldest turns after the opening prompt (system + task) are dropped
                    until the next reply gets its `max_new_tokens` again
    summarize       the policy is asked (`summary_prompt`) to summarise the episode so far;
                    the episode goes on from the opening prompt + that summary

Each change of context starts a new *segment*, the same notion as the gateway's
(`arborl.agents.gateway.episodes`): an ordinary token-exact `Trajectory` whose prompt is
the new context, exactly the ids the engine is given (carried-over ids are never
re-tokenized), with loss mask 1 only on the tokens sampled within that segment. The summary
is a segment of its own: prompt = the context it was asked in, one turn = the summary
(sampled by the policy, mask 1). Every segment of an episode carries its `episode_id` and
the episode's reward; the trainer assigns credit per episode (`episode_view`) and trains
every segment with it.

A context is the opening prompt followed by *window entries*, ``(response ids, ids after
it)``: each turn still in view, the reply and the observation that answered it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

ContextMode = Literal["truncate", "sliding_window", "summarize"]
Entry = tuple[list[int], list[int]]

SUMMARY_PROMPT = (
    "The conversation is too long to continue. Summarise it so far: the task, what you have "
    "done, what you learned, and what is left to do. Write only the summary."
)


class ContextError(ValueError):
    """The context budget cannot hold the episode's opening prompt (system + task)."""


def fit(base: Sequence[int], window: Sequence[Entry], limit: int) -> list[Entry]:
    """The newest entries of `window` that fit with `base` in `limit` tokens, oldest dropped
    first; the newest entry is always kept (it ends with what the model must answer)."""
    kept = list(window)
    size = len(base) + sum(len(r) + len(o) for r, o in kept)
    while len(kept) > 1 and size > limit:
        r, o = kept.pop(0)
        size -= len(r) + len(o)
    return kept


def joined(base: Sequence[int], window: Sequence[Entry]) -> list[int]:
    """The context's ids: the base, then each entry's response and what follows it."""
    ids = list(base)
    for r, o in window:
        ids += r + o
    return ids


def check_prompt_fits(prompt_len: int, max_context_tokens: int, mode: str) -> None:
    """Refuse a budget that cannot hold the opening prompt plus one reply token: no window
    or summary can make such an episode fit."""
    if prompt_len >= max_context_tokens:
        raise ContextError(
            f"the episode's opening prompt (system + task) is {prompt_len} tokens but "
            f"max_context_tokens is {max_context_tokens}: context={mode!r} keeps that prompt in "
            f"every segment, so raise max_context_tokens above {prompt_len} (plus room for replies) "
            "or shorten the task's prompt"
        )


def check_budget(context: str, max_new_tokens: int, max_context_tokens: int, prefix: str = "") -> None:
    """Refuse a mode that changes context with a reply budget the window cannot hold: a new
    context is the opening prompt and a full reply (`prefix`: how the config names the keys)."""
    if context != "truncate" and max_new_tokens >= max_context_tokens:
        raise ValueError(
            f"{prefix}context={context!r} needs {prefix}max_new_tokens ({max_new_tokens}) below "
            f"{prefix}max_context_tokens ({max_context_tokens}): a new context must hold the "
            "opening prompt and a reply"
        )
