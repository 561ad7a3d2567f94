"""What the gateway records: each call's token ids and log-probs, stitched per episode.

One episode is the calls a harness made under one episode id. They are stitched into
segments, each an ordinary token-exact `Trajectory`::

    call 1:  P1 ─────────────── | C1 |
    call 2:  P1 + C1 ───────────────── + O2 | C2 |           P2 extends P1+C1: same segment
    call 3:  P3 (history rewritten) ─────────── | C3 |       P3 does not: a new segment

    segment 0: prompt P1 | C1 (mask 1) | O2 (mask 0) | C2 (mask 1)
    segment 1: prompt P3 | C3 (mask 1)

A call continues the segment whose last prompt + completion its prompt extends token for
token (the longest such tail when several do: concurrent sub-conversations of one
episode stay apart); any other call starts a new segment. Every segment is trained on its
own with the episode's reward (`Episode.trajectories`); all share the episode's id as their
`episode_id`, so the trainer assigns credit per episode, not per segment.

Episode ids are capabilities: unguessable (uuid4), given out by the trainer, so a harness
that knows its own id cannot write into another episode. The store is guarded by one
thread lock (the HTTP server and the trainer may live on different threads); nothing is
awaited while it is held.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from ..trajectory import Trajectory, Turn
from ..vision import ImageInputs
from .errors import EpisodeEnded, UnknownEpisode

#: Ended episode ids remembered (to answer "ended" rather than "unknown"); oldest forgotten first.
ENDED_REMEMBERED = 100_000
T = TypeVar("T")


@dataclass(slots=True)
class Call:
    """One engine call: the exact ids the engine consumed and sampled."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    versions: list[int]
    finish_reason: str
    latency_s: float = 0.0
    images: ImageInputs | None = None  # the processor's pixels of every image in the prompt


@dataclass(slots=True)
class Segment:
    """Calls that extend one another token for token; `tail_text` is the decoded tail."""

    calls: list[Call] = field(default_factory=list)
    tail_text: str = ""

    @property
    def tail(self) -> list[int]:
        last = self.calls[-1]
        return last.prompt_ids + last.completion_ids

    def extended_by(self, prompt: list[int], images: ImageInputs | None = None) -> bool:
        """Whether `prompt` (with `images`) starts with the tail: its ids, and the same pixels
        for the tail's images (the same placeholder ids stand for any image)."""
        tail, before = self.tail, self.calls[-1].images
        if len(prompt) < len(tail) or prompt[: len(tail)] != tail:
            return False
        if before is None:
            return True
        return (
            images is not None
            and images.num_images >= before.num_images
            and images.split(before.num_images)[0] == before
        )

    def trajectory(self, episode: Episode, index: int) -> Trajectory:
        """This segment as a `Trajectory` (each call's completion a turn, the ids between
        a completion and the next call's completion its observation)."""
        first = self.calls[0]
        turns = []
        for k, call in enumerate(self.calls):
            nxt = self.calls[k + 1] if k + 1 < len(self.calls) else None
            end = len(call.prompt_ids) + len(call.completion_ids)
            seen = call.images.num_images if call.images is not None else 0
            shown = nxt.images.split(seen)[1] if nxt is not None and nxt.images is not None else None
            turns.append(
                Turn(
                    response_ids=list(call.completion_ids),
                    response_logprobs=list(call.logprobs),
                    observation_ids=list(nxt.prompt_ids[end:]) if nxt else [],
                    policy_versions=list(call.versions),
                    finish_reason=call.finish_reason,
                    gen_s=call.latency_s,
                    observation_images=shown,
                )
            )
        return Trajectory(
            prompt_ids=list(first.prompt_ids),
            turns=turns,
            task_id=episode.task_id,
            group_id=episode.group_id,
            traj_id=f"{episode.id}-{index}",
            episode_id=episode.id,  # the trainer credits the episode once, over its segments
            outcome_reward=episode.reward or 0.0,
            terminated=episode.reward is not None,
            metrics={"segment": float(index), "segments": float(len(episode.segments))},
            prompt_images=first.images,
        )


@dataclass
class Episode:
    """One harness episode: its segments, the raw replies it was given, its reward once ended."""

    id: str
    task_id: str = ""
    group_id: str = ""
    segments: list[Segment] = field(default_factory=list)
    #: canonical (content, tool calls) of a reply the gateway returned → the text the model wrote
    replies: dict[str, str] = field(default_factory=dict)
    reward: float | None = None

    def record(self, call: Call, tail_text: Callable[[Segment | None], str]) -> int:
        """Add a call to the segment it extends (the longest tail), else to a new one;
        `tail_text(segment)` decodes the call's prompt and completion, given the segment it
        extends (None: a new one), whose decoded tail it may extend."""
        best, best_len = -1, -1
        for i, seg in enumerate(self.segments):
            if seg.extended_by(call.prompt_ids, call.images) and len(seg.tail) > best_len:
                best, best_len = i, len(seg.tail)
        text = tail_text(self.segments[best] if best >= 0 else None)
        if best < 0:
            self.segments.append(Segment())
            best = len(self.segments) - 1
        seg = self.segments[best]
        seg.calls.append(call)
        seg.tail_text = text
        return best

    def trajectories(self) -> list[Trajectory]:
        return [seg.trajectory(self, i) for i, seg in enumerate(self.segments)]

    @property
    def num_calls(self) -> int:
        return sum(len(s.calls) for s in self.segments)


class EpisodeStore:
    """Open episodes by id; ended ones keep their record until taken (`end` returns it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, Episode] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()

    def open(self, episode_id: str | None = None, *, task_id: str = "", group_id: str = "") -> Episode:
        """A new episode (id: a fresh uuid4 hex unless given)."""
        eid = episode_id or uuid.uuid4().hex
        with self._lock:
            if eid in self._open or eid in self._ended:
                raise ValueError(f"episode {eid!r} already exists; episode ids are used once")
            ep = self._open[eid] = Episode(eid, task_id=task_id, group_id=group_id)
        return ep

    def get(self, episode_id: str) -> Episode:
        """The open episode, or `UnknownEpisode` / `EpisodeEnded` saying why not."""
        with self._lock:
            return self._get(episode_id)

    def _get(self, episode_id: str) -> Episode:
        ep = self._open.get(episode_id)
        if ep is not None:
            return ep
        shown = episode_id[:80]
        if episode_id in self._ended:
            raise EpisodeEnded(
                f"episode {shown!r} has ended (its reward is set); it takes no more calls. "
                "Start the next episode with a new episode id."
            )
        raise UnknownEpisode(
            f"episode {shown!r} is not open on this gateway. Open one first (POST /admin/episodes, "
            "or Gateway.open_episode) and carry its id in base_url (.../e/<id>/v1), the "
            "X-Arborl-Episode header, or the API key."
        )

    def with_episode(self, episode_id: str, fn: Callable[[Episode], T]) -> T:
        """Run ``fn(episode)`` under the store's lock (the episode must still be open)."""
        with self._lock:
            return fn(self._get(episode_id))

    def end(self, episode_id: str, reward: float) -> list[Trajectory]:
        """Set the reward, close the episode to further calls, return its trajectories."""
        with self._lock:
            ep = self._get(episode_id)
            ep.reward = float(reward)
            del self._open[episode_id]
            self._ended[episode_id] = None
            while len(self._ended) > ENDED_REMEMBERED:
                self._ended.popitem(last=False)
            return ep.trajectories()

    def snapshot(self, episode_id: str) -> list[Trajectory]:
        """The trajectories of an open episode so far (a copy)."""
        return self.with_episode(episode_id, lambda ep: ep.trajectories())

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)
