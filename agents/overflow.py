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

if TYPE_CHECKING:
    from .agent import Agent

log = logging.getLogger(__name__)


@dataclass
class Overflow:
    """The turn whose observation did not fit, and that observation (messages, ids)."""

    turn: Turn
    messages: list[dict[str, Any]]
    ids: list[int]


async def go_on(agent: Agent, state: EpisodeState, over: Overflow) -> None:
    """Go on past the context budget (sliding window or summary) in a new segment, whose
    prompt is the new context; end with `context_overflow` if even that cannot fit."""
    if agent.config.context == "summarize":
        window = await summarize(agent, state, over)
        if window is None:
            return
    else:
        limit = agent.config.max_context_tokens - agent.config.max_new_tokens
        window = fit(state.base, [*state.window, (over.turn.response_ids, over.ids)], limit)
    open_segment(state, window)
    if agent._room(state) < 1:
        await end_episode(state, truncation="context_overflow")


def open_segment(state: EpisodeState, window: list[Entry]) -> None:
    """Close the current segment and open one whose prompt is ``base + window``."""
    ids = joined(state.base, window)
    old = state.trajectory
    if old.turns:
        state.segments.append(old)
    state.trajectory = Trajectory(prompt_ids=list(ids), task_id=old.task_id, group_id=old.group_id)
    state.chat.ids, state.window = list(ids), list(window)
    state.chat.last_response, state.chat.awaiting_response = list(window[-1][0]), True


async def summarize(agent: Agent, state: EpisodeState, over: Overflow) -> list[Entry] | None:
    """Have the policy summarise the episode (a segment of its own); the window to go on
    with is that summary and the observation that overflowed. None if the episode ended."""
    cfg = agent.config
    state.chat.awaiting_response = False  # the overflowing observation was taken back
    ask = state.chat.append_messages([{"role": "user", "content": cfg.summary_prompt}])
    budget = min(cfg.summary_max_tokens or cfg.max_new_tokens, cfg.max_new_tokens)
    window = fit(state.base, [*state.window, (over.turn.response_ids, ask)], cfg.max_context_tokens - budget)
    open_segment(state, window)
    room = min(budget, agent._room(state))
    if room < 1:
        await end_episode(state, truncation="context_overflow")
        return None
    sampling = agent._sampling(state, room)
    try:
        gen = (await agent.engine.generate([state.chat.ids], sampling))[0]
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
    state.chat.awaiting_response = True
    state.chat.append_response(summary)
    return [(summary, state.chat.append_messages(over.messages))]
