"""Token-level, turn-level trajectories: what the agent hands to the trainer.

A trajectory is one token sequence, built by appending and never re-tokenized:

    prompt ids | turn 1 response | turn 1 observation | turn 2 response | ... | turn T response
    loss_mask:  | 0 0 0 0 0 0 0 | 1 1 1 1 1 1 1 1 1 1 | 0 0 0 0 0 0 0 0 0 | 1 1 1 1 1 | ... | 1 1 1
    logprobs:   | 0 ...         | behaviour log-probs | 0 ...             | log-probs  | ... |
    version:    | -1 ...        | policy version      | -1 ...            | version    | ... |

- `response_ids` are exactly the ids the engine sampled (loss mask 1, behaviour log-probs and
  the policy version that produced each token).
- `observation_ids` are the template-formatted ids of what came back (end-of-turn delimiter,
  tool results, the next generation prompt): loss mask 0.
- `Turn.reward` is the step reward; `Trajectory.outcome_reward` the episode's.
- A vision-language policy's images travel with the ids they belong to, as its processor made
  them (`arborl.agents.vision.ImageInputs`): `Trajectory.prompt_images` for the prompt's,
  `Turn.observation_images` for an observation's. Their placeholder tokens are in the ids
  already, expanded; `Trajectory.images()` is every image of `token_ids()`, in order.

`TrajectoryTree` holds tree rollouts: each node is one `Turn` whose prefix is its ancestors'
turns, so shared prefixes are stored (and were generated) once; `leaves()` flattens it into
ordinary trajectories that share a `group_id`.

Parquet I/O (`write_trajectories` / `read_trajectories`) uses a versioned pyarrow schema and
writes atomically (temporary file, then rename), so a crash never leaves a torn file.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .vision import ImageInputs

#: v2 tree_path, v3 Turn.anchor_state_hash and response_entropies, v4 Turn.anchor_observation,
#: v5 Trajectory.episode_id, v6 Turn.step_label, v7 Trajectory.prompt_images and
#: Turn.observation_images, v8 the images' pictures (PNG)
SCHEMA_VERSION = 8
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8)


@dataclass(slots=True)
class Turn:
    """One model turn and the environment's answer to it."""

    response_ids: list[int]
    response_logprobs: list[float]
    observation_ids: list[int] = field(default_factory=list)
    policy_versions: list[int] = field(default_factory=list)  # per response token
    reward: float = 0.0
    env_state_hash: str = ""  # the env state *after* this turn (its observation's state)
    finish_reason: str = "stop"  # stop | length
    tool_call_ok: bool | None = None
    gen_s: float = 0.0
    env_s: float = 0.0
    #: The env state this turn was taken from (GiGPO's anchor state): the state after reset for
    #: the first turn, else the previous turn's `env_state_hash`. "" when unknown.
    anchor_state_hash: str = ""
    #: Entropy (nats) of the distribution each response token was sampled from, where the
    #: engine reports it ([] otherwise): where the policy was unsure (tree rollouts fork there).
    response_entropies: list[float] = field(default_factory=list)
    #: The text of the observation this turn was taken from (reset's messages for the first
    #: turn, else the previous turn's observation), for GiGPO's similarity grouping of anchor
    #: states. "" when unknown.
    anchor_observation: str = ""
    #: An oracle's label of this turn, where the env gives one (its step ``info["step_label"]``;
    #: None otherwise): +1 the turn took a right action, -1 a wrong one (tool-cues' doors,
    #: whose host tool labels its calls through `ToolEpisode.step_label`). Only an oracle
    #: estimator reads it (``oracle_step``): the policy never sees it.
    step_label: float | None = None
    #: The processor's tensors for the images of `observation_ids` (None: it shows none).
    observation_images: ImageInputs | None = None

    def __post_init__(self) -> None:
        if len(self.response_logprobs) != len(self.response_ids):
            raise ValueError(
                f"{len(self.response_ids)} response ids but {len(self.response_logprobs)} log-probs"
            )
        if self.policy_versions and len(self.policy_versions) != len(self.response_ids):
            raise ValueError("policy_versions must have one entry per response token")
        if self.response_entropies and len(self.response_entropies) != len(self.response_ids):
            raise ValueError("response_entropies must have one entry per response token")


@dataclass(slots=True)
class Trajectory:
    """An episode as tokens. See the module docstring for the layout and masks."""

    prompt_ids: list[int]
    turns: list[Turn] = field(default_factory=list)
    task_id: str = ""
    group_id: str = ""
    traj_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    outcome_reward: float = 0.0
    terminated: bool = False
    truncation: str | None = None  # max_turns | max_tokens | context_overflow | env_error | None
    metrics: dict[str, float] = field(default_factory=dict)
    tree_path: list[int] = field(default_factory=list)  # a tree leaf's node id per turn; [] otherwise
    #: The episode this trajectory is a segment of, when the episode has several segments (its
    #: context was rewritten: a sliding window, a summary, a harness that rewrote history);
    #: "" when the trajectory is the whole episode. See `episode_view`.
    episode_id: str = ""
    #: The processor's tensors for the images of `prompt_ids` (None: it shows none).
    prompt_images: ImageInputs | None = None

    def __len__(self) -> int:
        return len(self.prompt_ids) + sum(len(t.response_ids) + len(t.observation_ids) for t in self.turns)

    def _layout(
        self,
        prompt: Sequence[float],
        response: Callable[[Turn], Sequence[float]],
        observation: Callable[[Turn], Sequence[float]],
        dtype: Any,
    ) -> np.ndarray:
        parts = [np.asarray(prompt, dtype=dtype)]
        for t in self.turns:
            parts += [np.asarray(response(t), dtype=dtype), np.asarray(observation(t), dtype=dtype)]
        return np.concatenate(parts)

    def token_ids(self) -> np.ndarray:
        """All ids, prompt first (int64)."""
        return self._layout(self.prompt_ids, lambda t: t.response_ids, lambda t: t.observation_ids, np.int64)

    def loss_mask(self) -> np.ndarray:
        """1 on tokens the model sampled, 0 on prompt and environment tokens (int8)."""
        return self._layout(
            [0] * len(self.prompt_ids),
            lambda t: [1] * len(t.response_ids),
            lambda t: [0] * len(t.observation_ids),
            np.int8,
        )

    def behavior_logprobs(self) -> np.ndarray:
        """Log-prob of each sampled token under the behaviour policy; 0 elsewhere (float32)."""
        return self._layout(
            [0.0] * len(self.prompt_ids),
            lambda t: t.response_logprobs,
            lambda t: [0.0] * len(t.observation_ids),
            np.float32,
        )

    def policy_versions(self) -> np.ndarray:
        """Policy version that sampled each token; -1 on prompt/environment tokens (int32)."""
        return self._layout(
            [-1] * len(self.prompt_ids),
            lambda t: t.policy_versions or [-1] * len(t.response_ids),
            lambda t: [-1] * len(t.observation_ids),
            np.int32,
        )

    def turn_spans(self) -> list[tuple[int, int]]:
        """[start, end) of each turn's response within `token_ids()`."""
        spans, pos = [], len(self.prompt_ids)
        for t in self.turns:
            spans.append((pos, pos + len(t.response_ids)))
            pos += len(t.response_ids) + len(t.observation_ids)
        return spans

    def images(self) -> ImageInputs | None:
        """Every image of `token_ids()`, in order (what one forward pass over it reads)."""
        return ImageInputs.concat([self.prompt_images, *(t.observation_images for t in self.turns)])

    @property
    def num_response_tokens(self) -> int:
        return sum(len(t.response_ids) for t in self.turns)


@dataclass(slots=True)
class TreeNode:
    """A turn in a rollout tree; `parent` is -1 for children of the root prompt.

    A node with `continues=True` is the first part of a turn that was branched at an
    uncertain token: its children hold the rest of that turn (each a different
    continuation, with the observation). Flattening joins the parts into one `Turn`.
    """

    turn: Turn
    parent: int = -1
    terminal: bool = False
    outcome_reward: float | None = None  # set on leaves
    truncation: str | None = None
    continues: bool = False


@dataclass(slots=True)
class TrajectoryTree:
    """Tree rollouts: one prompt, turns branching into children; shared prefixes stored once."""

    prompt_ids: list[int]
    nodes: list[TreeNode] = field(default_factory=list)
    task_id: str = ""
    group_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    prompt_images: ImageInputs | None = None  # the images of `prompt_ids`, as in `Trajectory`

    def add(self, turn: Turn, parent: int = -1) -> int:
        if parent >= len(self.nodes):
            raise IndexError(f"parent {parent} does not exist ({len(self.nodes)} nodes)")
        self.nodes.append(TreeNode(turn, parent))
        return len(self.nodes) - 1

    def children(self, node: int) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.parent == node]

    def path(self, node: int) -> list[int]:
        """Node ids from the root's child down to `node`."""
        out = []
        while node != -1:
            out.append(node)
            node = self.nodes[node].parent
        return out[::-1]

    def leaf_ids(self) -> list[int]:
        parents = {n.parent for n in self.nodes}
        return [i for i in range(len(self.nodes)) if i not in parents]

    def leaves(self) -> list[Trajectory]:
        """One trajectory per leaf (same group id), for training on the flattened tree.

        `tree_path` holds, per turn, the id of the node that ends the turn (a turn split at an
        uncertain token is one turn here: its first part's tokens are shared with siblings).
        """
        out = []
        for leaf in self.leaf_ids():
            node = self.nodes[leaf]
            turns, ends = self._joined(self.path(leaf))
            out.append(
                Trajectory(
                    prompt_ids=list(self.prompt_ids),
                    turns=turns,
                    task_id=self.task_id,
                    group_id=self.group_id,
                    traj_id=f"{self.group_id}-{leaf}",
                    outcome_reward=node.outcome_reward or 0.0,
                    terminated=node.terminal,
                    truncation=node.truncation,
                    tree_path=ends,
                    prompt_images=self.prompt_images,
                )
            )
        return out

    def _joined(self, path: list[int]) -> tuple[list[Turn], list[int]]:
        """The turns along `path`, parts of a split turn joined into one."""
        turns: list[Turn] = []
        ends: list[int] = []
        pending: list[Turn] = []
        for i in path:
            node = self.nodes[i]
            if node.continues:
                pending.append(node.turn)
                continue
            turns.append(join_turns([*pending, node.turn]) if pending else node.turn)
            ends.append(i)
            pending = []
        return turns, ends

    def generated_tokens(self) -> int:
        """Tokens actually sampled for the whole tree (each shared prefix counted once)."""
        return sum(len(n.turn.response_ids) for n in self.nodes)


def join_turns(parts: Sequence[Turn]) -> Turn:
    """One turn from its parts: their response tokens in order, the last part's rest."""
    last = parts[-1]
    return Turn(
        response_ids=[x for p in parts for x in p.response_ids],
        response_logprobs=[x for p in parts for x in p.response_logprobs],
        observation_ids=list(last.observation_ids),
        policy_versions=[x for p in parts for x in (p.policy_versions or [-1] * len(p.response_ids))],
        reward=last.reward,
        env_state_hash=last.env_state_hash,
        finish_reason=last.finish_reason,
        tool_call_ok=last.tool_call_ok,
        gen_s=sum(p.gen_s for p in parts),
        env_s=last.env_s,
        anchor_state_hash=parts[0].anchor_state_hash,
        anchor_observation=parts[0].anchor_observation,
        step_label=last.step_label,
        observation_images=last.observation_images,
        response_entropies=(
            [x for p in parts for x in p.response_entropies]
            if all(p.response_entropies or not p.response_ids for p in parts)
            else []
        ),
    )


def episodes_of(trajectories: Sequence[Trajectory]) -> list[list[int]]:
    """Indices of `trajectories` grouped by episode (segments sharing an `episode_id`, in
    order; a trajectory without one is an episode of its own), in order of first appearance."""
    out: dict[str, list[int]] = {}
    for i, t in enumerate(trajectories):
        out.setdefault(t.episode_id or f"\0{i}", []).append(i)
    return list(out.values())


def episode_view(segments: Sequence[Trajectory]) -> Trajectory:
    """One episode's segments as one trajectory, for credit assignment only: the first
    segment's prompt, then every segment's turns in order (later segments' prompts, which
    repeat context, are left out). Its turn k is turn k of the concatenated segments, so a
    turn-level estimator sees the episode's whole sequence of turns, and a group estimator
    (GRPO) counts the episode once, not once per segment."""
    first, last = segments[0], segments[-1]
    return Trajectory(
        prompt_ids=list(first.prompt_ids),
        turns=[turn for s in segments for turn in s.turns],
        task_id=first.task_id,
        group_id=first.group_id,
        traj_id=first.episode_id or first.traj_id,
        outcome_reward=last.outcome_reward,
        terminated=last.terminated,
        truncation=last.truncation,
        metrics=dict(last.metrics),
        prompt_images=first.prompt_images,
    )


# ---- Parquet ----------------------------------------------------------------------------------
_IMAGES = pa.struct(  # `ImageInputs.to_row`: float32 pixels bit for bit, flat, with their shape
    [
        ("pixel_values", pa.list_(pa.float32())),
        ("pixel_shape", pa.list_(pa.int32())),
        ("image_grid_thw", pa.list_(pa.int64())),
        ("pictures", pa.list_(pa.binary())),  # each image as the processor read it, PNG
    ]
)
_TURN = pa.struct(
    [
        ("response_ids", pa.list_(pa.int32())),
        ("response_logprobs", pa.list_(pa.float32())),
        ("observation_ids", pa.list_(pa.int32())),
        ("policy_versions", pa.list_(pa.int32())),
        ("reward", pa.float64()),
        ("env_state_hash", pa.string()),
        ("finish_reason", pa.string()),
        ("tool_call_ok", pa.bool_()),
        ("gen_s", pa.float64()),
        ("env_s", pa.float64()),
        ("anchor_state_hash", pa.string()),
        ("response_entropies", pa.list_(pa.float32())),
        ("anchor_observation", pa.string()),
        ("step_label", pa.float64()),
        ("observation_images", _IMAGES),
    ]
)
SCHEMA = pa.schema(
    [
        ("traj_id", pa.string()),
        ("task_id", pa.string()),
        ("group_id", pa.string()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("turns", pa.list_(_TURN)),
        ("outcome_reward", pa.float64()),
        ("terminated", pa.bool_()),
        ("truncation", pa.string()),
        ("metrics", pa.map_(pa.string(), pa.float64())),
        ("tree_path", pa.list_(pa.int32())),
        ("episode_id", pa.string()),
        ("prompt_images", _IMAGES),
    ],
    metadata={b"arborl.trajectory_schema": str(SCHEMA_VERSION).encode()},
)


def _row(t: Trajectory) -> dict[str, Any]:
    return {
        "traj_id": t.traj_id,
        "task_id": t.task_id,
        "group_id": t.group_id,
        "prompt_ids": t.prompt_ids,
        "turns": [_turn_row(turn) for turn in t.turns],
        "outcome_reward": t.outcome_reward,
        "terminated": t.terminated,
        "truncation": t.truncation,
        "metrics": list(t.metrics.items()),
        "tree_path": t.tree_path,
        "episode_id": t.episode_id,
        "prompt_images": t.prompt_images.to_row() if t.prompt_images is not None else None,
    }


def _turn_row(turn: Turn) -> dict[str, Any]:
    row = {f.name: getattr(turn, f.name) for f in dataclasses.fields(turn)}
    images = turn.observation_images
    row["observation_images"] = images.to_row() if images is not None else None
    return row


def write_trajectories(path: str | Path, trajectories: Sequence[Trajectory]) -> Path:
    """Write one Parquet file atomically (a crash leaves the old file or none, never half)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([_row(t) for t in trajectories], schema=SCHEMA)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def read_trajectories(paths: str | Path | Iterable[str | Path]) -> list[Trajectory]:
    """Read trajectories from one file, or several; refuses files of a newer schema."""
    if isinstance(paths, str | Path):
        paths = [paths]
    out = []
    for p in paths:
        table = pq.read_table(p)
        version = int((table.schema.metadata or {}).get(b"arborl.trajectory_schema", b"0"))
        if version not in READABLE_VERSIONS:
            raise ValueError(f"{p} has trajectory schema v{version}; this arborl reads v{READABLE_VERSIONS}")
        for row in table.to_pylist():
            turns = [
                Turn(
                    **{
                        **turn,
                        "anchor_state_hash": turn.get("anchor_state_hash") or "",
                        "anchor_observation": turn.get("anchor_observation") or "",
                        "response_entropies": list(turn.get("response_entropies") or []),
                        "observation_images": ImageInputs.from_row(turn.get("observation_images")),
                    }
                )
                for turn in row.pop("turns")
            ]
            row["metrics"] = dict(row["metrics"] or [])
            row["tree_path"] = list(row.get("tree_path") or [])
            row["episode_id"] = row.get("episode_id") or ""
            row["prompt_images"] = ImageInputs.from_row(row.get("prompt_images"))
            out.append(Trajectory(turns=turns, **row))
    return out
