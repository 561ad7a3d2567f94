"""An agent's episode as it is recorded: in progress, copied for a fork, ended, and finished.

    EpisodeState  ──end_episode──▶  done (the outcome on every segment)  ──▶  AgentEpisode

`EpisodeState` is what `Agent.step` works on: the env, the token sequence the engine sees
(`chat`), the trajectory being recorded and, once the context has changed
(`arborl.agents.context`), the earlier segments. `end_episode` is the one way an episode
ends, by the env or by a budget: a budget lets the env score the state it reached, and every
segment carries the episode's outcome. `episode_metrics` are the numbers a finished episode
logs.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium

from arborl.envs import afinish

from .chat import TokenizedChat
from .context import Entry
from .trajectory import Trajectory
from .vision import ImageInputs

log = logging.getLogger(__name__)


@dataclass
class EpisodeState:
    """An episode in progress: its env, its token sequence and what has been recorded."""

    env: gymnasium.Env
    task: Any
    chat: TokenizedChat
    trajectory: Trajectory
    messages: list[dict[str, Any]]
    infos: list[dict[str, Any]]
    actions: list[str] = field(default_factory=list)  # decoded replies, for replaying the prefix
    observations: list[list[dict[str, Any]]] = field(default_factory=list)  # reset's, then each step's
    seed: int | None = None
    done: bool = False
    error: str | None = None
    # a context is `base` (the opening prompt's ids) + `window` (see arborl.agents.context)
    base: list[int] = field(default_factory=list)
    window: list[Entry] = field(default_factory=list)
    #: a vision-language policy's images of `base`, and of each window entry's observation
    #: (None: it shows none), so that a new context carries the pictures its ids show
    base_images: ImageInputs | None = None
    window_images: list[ImageInputs | None] = field(default_factory=list)
    segments: list[Trajectory] = field(default_factory=list)  # earlier segments, in order
    #: The episode's place among the episodes of its group this agent started or forked (in
    #: call order): its own part of a seeded sampling's noise (`Agent._sampling`).
    place: int = 0


@dataclass
class AgentEpisode:
    """A finished episode: the trajectory for training plus what eval and logs show."""

    trajectory: Trajectory  # the last segment (the whole episode unless its context changed)
    messages: list[dict[str, Any]]
    infos: list[dict[str, Any]]
    error: str | None = None
    segments: list[Trajectory] = field(default_factory=list)  # every segment, in order


class ForkMismatch(RuntimeError):
    """Replaying an episode's actions in a fresh env did not reproduce it."""


def snapshot(state: EpisodeState) -> EpisodeState:
    """A copy of the episode's record without its env (`Agent.fork` gives it one). The
    lists are copied, the `Turn`s they hold are shared (their tokens were sampled once)."""
    chat = copy.copy(state.chat)
    chat.ids, chat.messages = list(state.chat.ids), list(state.chat.messages)
    chat.last_response = list(state.chat.last_response)
    chat.appended_images = list(state.chat.appended_images)
    traj = copy.copy(state.trajectory)
    traj.turns, traj.metrics = list(state.trajectory.turns), dict(state.trajectory.metrics)
    return EpisodeState(
        None,  # type: ignore[arg-type]  # a snapshot holds no env; fork() gives it one
        state.task,
        chat,
        traj,
        list(state.messages),
        list(state.infos),
        list(state.actions),
        list(state.observations),
        state.seed,
        state.done,
        base=state.base,
        window=list(state.window),
        base_images=state.base_images,
        window_images=list(state.window_images),
        segments=list(state.segments),
        place=state.place,
    )


async def end_episode(
    state: EpisodeState,
    *,
    truncation: str | None,
    terminated: bool = False,
    error: str | None = None,
    finish_env: bool = True,
) -> None:
    """Mark the episode over; when a budget (not the env) ended it, let the env score it."""
    turns = [t for s in episode_segments(state) if not is_summary(s) for t in s.turns]
    if finish_env:
        try:
            bonus, extra = await afinish(state.env)
        except Exception as e:
            log.warning("scoring the cut episode failed: %s: %s", type(e).__name__, e)
            bonus, extra = 0.0, {"finish_error": f"{type(e).__name__}: {e}"}
        if turns:
            turns[-1].reward += float(bonus)
        if extra.get("sandbox_fault"):  # the sandbox failed while the env scored the episode
            truncation = str(extra["truncated_by"])
        state.infos.append({**dict(extra), "truncated_by": truncation})
    segments = episode_segments(state)
    eid = segments[0].episode_id or segments[0].traj_id
    for i, traj in enumerate(segments):  # every segment carries the episode's outcome
        traj.outcome_reward = float(sum(t.reward for t in turns))
        traj.terminated, traj.truncation = terminated, None if terminated else truncation
        if len(segments) > 1:
            traj.episode_id = eid
            traj.traj_id = f"{eid}-s{i}"
            traj.metrics.update(segment=float(i), segments=float(len(segments)))
    state.done, state.error = True, error


def is_summary(traj: Trajectory) -> bool:
    """Whether the segment is a summary the policy was asked for (no env turn in it)."""
    return bool(traj.metrics.get("summary"))


def episode_segments(state: EpisodeState) -> list[Trajectory]:
    """The episode's segments so far; a last one left with no turn (the episode ended right
    after its context changed) has nothing to train and is left out."""
    last = state.trajectory
    return [*state.segments, last] if last.turns or not state.segments else list(state.segments)


def episode_metrics(segments: list[Trajectory], infos: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """What a finished episode logs, over all its segments."""
    calls = [c for info in infos for c in (info.get("tool_calls") or [])]
    turns = [t for s in segments if not is_summary(s) for t in s.turns]
    everything = [t for s in segments for t in s.turns]  # summaries were sampled too
    return {
        "turns": float(len(turns)),
        "response_tokens": float(sum(len(t.response_ids) for t in everything)),
        "total_tokens": float(sum(len(s) for s in segments)),
        "success": float(segments[-1].outcome_reward > 0),
        "tool_calls": float(len(calls)),
        "tool_errors": float(sum(not c.get("ok") for c in calls)),
        "format_errors": float(sum(bool(info.get("format_error")) for info in infos)),
        "gen_s": float(sum(t.gen_s for t in everything)),
        "env_s": float(sum(t.env_s for t in turns)),
        "segments": float(len(segments)),
        "summaries": float(sum(is_summary(s) for s in segments)),
    }


def observation_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of an observation's messages, one per line (non-text parts left out): what
    GiGPO's similarity grouping compares."""
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
    return "\n".join(parts)
