"""`tool-cues`: houses of six rooms, each with a cue on its wall that says which door opens.

Issue 50 §2's suite: the conditions under which step credit (GiGPO) should beat episode
credit. Every room has a red, a blue and a green door, and a shape painted on the wall;
one rule, the same in every house and never stated, maps the shape to the door that opens
(`RULE`: a circle the red door, a triangle the blue one, a square the green one). The cues
are drawn per room, so a house mixes them and the right door depends on the state. A
wrong door is locked: the agent stays where it is and is told so.

    question   "Find the code. You are in room Q: a circle is painted on the wall.
                A red door, a blue door and a green door."
    door("blue")   → "The blue door is locked. You are still in room Q: a circle is ..."
    door("red")    → "room K: a triangle is painted on the wall. A red door, a blue door and a green door."
    ...            (six right doors in all)
    door("green")  → "room B: the code is 512."   (the episode ends: the code is the answer)

Opening the last door ends the episode with the code as its answer (the door tool sets the
episode's `answer`, which the tool env scores as a final answer), so success is reaching the
last room: what the benchmark measures is the choice of doors, not copying a number (a tiny
model warm-started for minutes copies the code no better than chance). The budget
(`MAX_TURNS` = 10: six doors, plus four) tolerates four locked doors. Every episode of a task starts in its first room, and the room reached after k right
doors is the same whichever locked doors were tried on the way: its description is a
function of the room alone, and the env's state is the room (`episode.state["room"]`, the
number of right doors so far, and nothing else), so a task's episodes meet in the same
states, where the same cue asks for the same door (GiGPO's anchor groups, in which a right
door's turn can be compared with a wrong one's).

`tool-cues-single` is the control: one door (`SINGLE` = blue) opens in every room whatever
its cue, so the right action does not depend on the state and step credit has nothing to add
over episode credit (GiGPO should equal GRPO there).

The warm start's walker (`explore_policy`) opens a door at random among those of the room
not yet found locked, so it never learns what a cue means. In each room it meets 0, 1 or 2
locked doors, each with probability 1/3 (where the right door falls in a random order of
three), independently over the six rooms, and it succeeds within the budget iff its locked
doors total at most 4. The number of ways to total k is the coefficient of x^k in
(1 + x + x²)⁶ = 1 + 6x + 21x² + 50x³ + 90x⁴ + ..., so

    P(success) = (1 + 6 + 21 + 50 + 90) / 3⁶ = 168 / 729 ≈ 23.0 %      (`WALKER_SUCCESS`)

in either suite (the walker ignores the cue). Given 3 · ROOMS = 18 turns it always
succeeds (its demonstrations' budget).

Each turn that opens a door is labelled for an oracle (issue 50's `oracle_step` estimator,
`arborl.agents.credit.oracle`): the door tool sets the episode's `step_label` to +1 for a
right door, -1 for a locked one (a reply with several calls keeps the lowest), and the tool
env reports it as the step's ``info["step_label"]`` (`Turn.step_label`). The label is not
part of the state: `episode.state` holds the room only.

`tool-cues-image` is tool-cues for a vision-language policy: the same houses, rule and tool,
on `arborl/Tool-v0` with ``obs_type="image"`` and `cue_pictures`, so the words say only that
"a shape is painted on the wall" and the shape is in a picture beside them (a circle, a
triangle or a square, each in its own colour: `PICTURE_COLOURS`). The cue, the one thing the
right door depends on, is then in the pixels alone: a text policy cannot do better than the
walker there, and a policy that learns to read the picture can do as well as on tool-cues.

- `load_suite(single=False)`: the 64 evaluation houses, fixed (per suite).
- `generate_cue_tasks(n, seed, single=False)`: a training stream, never an evaluation house.
- `gold_policy`, `empty_policy`, `explore_policy`; `door` (the tool's host function).
- `cue_pictures` (tool-cues-image's `pictures`), `draw_cue`; `blank_pictures`, the control
  `tool-cues-image-blank`: the same words and a bare wall in every picture (no policy beats
  the walker there, so a gain on tool-cues-image over it is the pictures' doing).
"""

from __future__ import annotations

import functools
import random
import re
import string
from typing import Any, Protocol

import numpy as np

from ..common import HostToolEpisode, Policy, content_text
from ..stream import draw_unseen
from ..task_types import ToolDecl, ToolTask
from .tool_mini import tool_call

EVAL_SIZE = 64
ROOMS = 6
MAX_LOCKED = 4
MAX_TURNS = ROOMS + MAX_LOCKED  # six doors (the last one ends the episode), plus four locked doors
COLOURS = ("red", "blue", "green")
#: The one rule of every `tool-cues` house (never said): the cue on the wall → the door that opens.
RULE = {"circle": "red", "triangle": "blue", "square": "green"}
CUES = tuple(RULE)
#: The door that opens in every room of a `tool-cues-single` house.
SINGLE = "blue"
#: The walker's chance of success within `MAX_TURNS` (see the module docstring).
WALKER_SUCCESS = 168 / 729
_EVAL_SEED = "tool-cues-eval-v1"
SYSTEM_PROMPT = (
    "Find the code. Open doors with the door tool; a locked door leaves you where you are. "
    "The code is in the last room: reaching it ends the search."
)
DOOR_TOOL = ToolDecl(
    name="door",
    description="Go through a door of the room you are in.",
    parameters={
        "type": "object",
        "properties": {"colour": {"type": "string", "enum": list(COLOURS)}},
        "required": ["colour"],
    },
    handler="arborl.tasks.toy.tool_cues:door",
)
_CODE = re.compile(r"the code is (\d+)")
_ROOM = re.compile(r"room ([A-Z]):")
_LOCKED = re.compile(r"^The (\w+) door is locked\.")
_DOORS = "A red door, a blue door and a green door."
_CUE = re.compile(r"\ba (circle|triangle|square) is painted on the wall\b")
#: The fill of each cue's picture: colours that are not the doors' (the picture says which
#: shape, not which door), on a grey wall.
PICTURE_COLOURS = {"circle": (230, 200, 40), "triangle": (40, 200, 220), "square": (200, 40, 200)}
# 2 x 2 of Qwen2-VL's 28-pixel merged patches: 4 image tokens (the tiny VLM's 4 px patches: 49)
PICTURE_PX = 56


class LabelledEpisode(HostToolEpisode, Protocol):
    """A host tool's episode that also takes a label of the step the call is in (the tool
    env's `ToolEpisode`): +1 a right action, -1 a wrong one, None unlabelled. The env clears
    it before each step and reports it as the step's ``info["step_label"]``."""

    step_label: float | None
    answer: str | None


def describe(house: dict[str, Any], at: int) -> str:
    """Room `at` (0..ROOMS) of `house` as the agent sees it: a function of the room alone."""
    room = f"room {house['rooms'][at]}"
    if at == ROOMS:
        return f"{room}: the code is {house['code']}."
    return f"{room}: a {house['cues'][at]} is painted on the wall. {_DOORS}"


def _label(episode: LabelledEpisode, value: float) -> None:
    # one label per step: a reply that opened a locked door among others is a wrong step
    old = getattr(episode, "step_label", None)
    episode.step_label = value if old is None else min(old, value)


def door(colour: str, episode: LabelledEpisode) -> str:
    """The `door` tool: the episode's state is the room, how many right doors are behind it."""
    house: dict[str, Any] = episode.task.metadata
    at = int(episode.state.get("room", 0))
    if at >= ROOMS:
        return "There are no more doors. Reply with the code."
    if colour not in COLOURS:
        return "There is no such door: red, blue or green."
    if colour != house["right"][at]:
        _label(episode, -1.0)
        return f"The {colour} door is locked. You are still in {describe(house, at)}"
    _label(episode, 1.0)
    episode.state["room"] = at + 1
    if at + 1 == ROOMS:  # the last room: the goal, whose code ends the episode as its answer
        episode.answer = str(house["code"])
    return describe(house, at + 1)


def _house(rng: random.Random, single: bool) -> dict[str, Any]:
    cues = [rng.choice(CUES) for _ in range(ROOMS)]
    return {
        "rooms": rng.sample(string.ascii_uppercase, ROOMS + 1),
        "cues": cues,
        "right": [SINGLE if single else RULE[c] for c in cues],
        "code": rng.randrange(100, 1000),
    }


def _name(single: bool) -> str:
    return "tool-cues-single" if single else "tool-cues"


def _task(task_id: str, h: dict[str, Any], single: bool) -> ToolTask:
    return ToolTask(
        id=task_id,
        question=f"Find the code. You are in {describe(h, 0)}",
        system_prompt=SYSTEM_PROMPT,
        tools=(DOOR_TOOL,),
        builtin_tools=(),
        answer=h["code"],
        verifier="numeric",
        metadata={"suite": _name(single), "kind": "cues", **h},
    )


@functools.cache
def _eval_houses(single: bool) -> tuple[dict[str, Any], ...]:
    rng = random.Random(f"{_EVAL_SEED}:single" if single else _EVAL_SEED)
    return tuple(_house(rng, single) for _ in range(EVAL_SIZE))


def _key(h: dict[str, Any]) -> tuple[Any, ...]:
    return (*h["rooms"], *h["cues"], h["code"])


def load_suite(single: bool = False) -> list[ToolTask]:
    """The 64 evaluation houses of `tool-cues` (of `tool-cues-single` with `single`)."""
    name = _name(single)
    return [_task(f"{name}/{i:03d}", h, single) for i, h in enumerate(_eval_houses(single))]


def load_single() -> list[ToolTask]:
    """`tool-cues-single`'s 64 evaluation houses (the registry's loader)."""
    return load_suite(single=True)


def generate_cue_tasks(n: int, seed: int = 0, single: bool = False) -> list[ToolTask]:
    """`n` training houses, reproducible by `seed`, none of them an evaluation house of the
    same suite."""
    name = _name(single)
    rng = random.Random(f"{name}-train:{seed}")
    houses = draw_unseen(n, lambda: _house(rng, single), _key, _eval_houses(single))
    return [_task(f"{name}-train/s{seed}-{i:06d}", h, single) for i, h in enumerate(houses)]


# ---- pictures (tool-cues-image) ----------------------------------------------------------
def draw_cue(shape: str, px: int = PICTURE_PX) -> np.ndarray:
    """The picture of a cue: `shape` filled in its colour on a grey wall, uint8 [px, px, 3]."""
    y, x = np.mgrid[0:px, 0:px] + 0.5
    c, r = px / 2, px * 0.35
    if shape == "circle":
        inside = (x - c) ** 2 + (y - c) ** 2 <= r**2
    elif shape == "square":
        inside = (abs(x - c) <= r * 0.85) & (abs(y - c) <= r * 0.85)
    elif shape == "triangle":  # apex up: the half-width grows linearly from the apex to the base
        top, base = c - r, c + r * 0.8
        inside = (y >= top) & (y <= base) & (abs(x - c) <= (y - top) / (base - top) * r)
    else:
        raise ValueError(f"no picture of a {shape!r}: one of {', '.join(CUES)}")
    img = np.full((px, px, 3), 128, dtype=np.uint8)
    img[inside] = PICTURE_COLOURS[shape]
    return img


def cue_pictures(text: str, task: Any = None) -> tuple[str, list[np.ndarray]]:
    """`tool-cues-image`'s pictures (`arborl/Tool-v0`'s ``pictures``): the cue a room's
    description names, drawn, and the text saying only that a shape is painted there."""
    found = _CUE.search(text)
    if not found:
        return text, []
    return _CUE.sub("a shape is painted on the wall (the picture)", text), [draw_cue(found.group(1))]


def blank_pictures(text: str, task: Any = None) -> tuple[str, list[np.ndarray]]:
    """`tool-cues-image-blank`'s pictures, the control: the same words as `cue_pictures` and a
    picture of the bare wall whatever the cue, so nothing tells the doors apart."""
    words, drawn = cue_pictures(text, task)
    return words, [np.full_like(p, 128) for p in drawn]


# ---- scripted policies ------------------------------------------------------------------
def _seen(messages: list[dict[str, Any]]) -> list[str]:
    return [content_text(m.get("content")) for m in messages if m.get("role") in ("user", "tool")]


def _locked_here(seen: list[str]) -> set[str]:
    """The doors found locked in the room the agent is in: the run of "locked" results at
    the end (a locked door leaves the agent where it is; a right one ends the run)."""
    locked = set()
    for text in reversed(seen):
        found = _LOCKED.match(text)
        if not found:
            break
        locked.add(found.group(1))
    return locked


def _walker(task: ToolTask, pick: Any) -> Policy:
    """Answers the code once it is seen; otherwise the door `pick(room, locked, turn)` names,
    where `room` is the index of the room the agent is in and `locked` its doors found locked."""
    rooms = task.metadata["rooms"]

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        seen = _seen(messages)
        code = _CODE.search(seen[-1])
        if code:
            return code.group(1)
        here = _ROOM.findall(seen[-1])
        room = rooms.index(here[-1]) if here else 0
        return tool_call("door", {"colour": pick(room, _locked_here(seen), len(seen))})

    return policy


def gold_policy(task: ToolTask) -> Policy:
    """The right door of every room (the rule applied to its cue), then the code."""
    return _walker(task, lambda room, locked, turn: task.metadata["right"][room])


def explore_policy(task: ToolTask, seed: int = 0) -> Policy:
    """A door at random among the room's doors not yet found locked (seeded by the task,
    `seed` and the turn): the warm start's demonstrations, which show the tool, the format
    and getting past a locked door but not what a cue means. Succeeds within `MAX_TURNS`
    with probability `WALKER_SUCCESS`, always within 3 * ROOMS turns."""

    def pick(room: int, locked: set[str], turn: int) -> str:
        rng = random.Random(f"{task.id}:{seed}:{turn}")
        return rng.choice([c for c in COLOURS if c not in locked])

    return _walker(task, pick)


def empty_policy(task: ToolTask) -> Policy:
    """Gives up at once (a final answer that is never right)."""
    return lambda messages, info: "I don't know."
