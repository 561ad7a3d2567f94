"""Going on past `max_context_tokens` (`context="sliding_window"` or `"summarize"`).

When an observation leaves no room for the next reply, `Agent.step` takes it back and hands
it here (`Overflow`). The episode goes on in a new context, a new segment
(`arborl.agents.context` draws the picture):

    sliding_window  the newest window entries that fit with the opening prompt and a full reply
    summarize       the policy is asked for a summary (a segment of its own); the episode goes
                    on from the opening prompt + the summary + the observation that overflowed

If even the new context leaves no room, the episode ends with `context_overflow`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .context import Entry, fit, joined
from .episode import EpisodeState, end_episode
from .trajectory import Trajectory, Turn
from .vision import ImageInputs

if TYPE_CHECKING:
    from .agent import Agent

log = logging.getLogger(__name__)


@dataclass
class Overflow:
    """The turn whose observation did not fit, and that observation (messages, ids, the
    images a vision-language policy's processor made of it)."""

    turn: Turn
    messages: list[dict[str, Any]]
    ids: list[int]
    images: ImageInputs | None = None


async def go_on(agent: Agent, state: EpisodeState, over: Overflow) -> None:
    """Go on past the context budget (sliding window or summary) in a new segment, whose
    prompt is the new context; end with `context_overflow` if even that cannot fit."""
    if agent.config.context == "summarize":
        summarized = await summarize(agent, state, over)
        if summarized is None:
            return
        window, images = summarized
    else:
        limit = agent.config.max_context_tokens - agent.config.max_new_tokens
        window = fit(state.base, [*state.window, (over.turn.response_ids, over.ids)], limit)
        images = [*state.window_images, over.images][len(state.window) + 1 - len(window) :]
    open_segment(state, window, images)
    if agent._room(state) < 1:
        await end_episode(state, truncation="context_overflow")


def open_segment(state: EpisodeState, window: list[Entry], images: list[ImageInputs | None]) -> None:
    """Close the current segment and open one whose prompt is ``base + window``; `images`
    are the window entries' (a vision-language policy's: the new prompt shows the base's and
    theirs, in order, and nothing is appended after it yet)."""
    ids = joined(state.base, window)
    old = state.trajectory
    if old.turns:
        state.segments.append(old)
    state.trajectory = Trajectory(prompt_ids=list(ids), task_id=old.task_id, group_id=old.group_id)
    state.chat.ids, state.window = list(ids), list(window)
    state.chat.last_response, state.chat.awaiting_response = list(window[-1][0]), True
    prompt_images = ImageInputs.concat([state.base_images, *images])
    state.trajectory.prompt_images = state.chat.prompt_images = prompt_images
    state.chat.appended_images, state.chat.last_images = [], None
    state.window_images = list(images)


async def summarize(
    agent: Agent, state: EpisodeState, over: Overflow
) -> tuple[list[Entry], list[ImageInputs | None]] | None:
    """Have the policy summarise the episode (a segment of its own); the window to go on
    with is that summary and the observation that overflowed (and its images). None if the
    episode ended."""
    cfg = agent.config
    state.chat.awaiting_response = False  # the overflowing observation was taken back
    ask = state.chat.append_messages([{"role": "user", "content": cfg.summary_prompt}])
    budget = min(cfg.summary_max_tokens or cfg.max_new_tokens, cfg.max_new_tokens)
    window = fit(state.base, [*state.window, (over.turn.response_ids, ask)], cfg.max_context_tokens - budget)
    open_segment(state, window, [*state.window_images, None][len(state.window) + 1 - len(window) :])
    room = min(budget, agent._room(state))
    if room < 1:
        await end_episode(state, truncation="context_overflow")
        return None
    sampling = agent._sampling(state, room)
    try:
        gen = await agent.generate(state, sampling)  # with the window's pictures
    except Exception as e:
        log.warning("summary generation failed: %s: %s", type(e).__name__, e)
        await end_episode(state, truncation="engine_error", error=f"{type(e).__name__}: {e}")
        return None
    summary = [int(t) for t in gen.token_ids]
    state.trajectory.turns.append(
        Turn(
            response_ids=summary,
            response_logprobs=[float(x) for x in gen.logprobs],
            policy_versions=[agent.version_offset + v for v in gen.versions],
            response_entropies=list(gen.entropies or []),
            finish_reason=gen.finish_reason,
            gen_s=gen.latency_s,
        )
    )
    state.trajectory.metrics["summary"] = 1.0
    # the episode goes on from the opening prompt + the summary, then what overflowed
    state.chat.ids = list(state.base)
    state.chat.prompt_images, state.chat.appended_images = state.base_images, []
    state.chat.awaiting_response = True
    state.chat.append_response(summary)
    return [(summary, state.chat.append_messages(over.messages))], [state.chat.last_images]
