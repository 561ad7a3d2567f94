"""`tool-doors`: three doors to a code, opened with a tool that moves the agent.

The only action is a colour, and the room the agent stands in is the env's state (a host
tool with an `episode`, `arborl.tasks.HostToolEpisode`), so there is nothing to copy but the
code at the end, and no room to reach except through its door: tool-maze's name search let
a policy guess rooms past the doors (docs/results/tool-maze.md). Rooms are letters, so the
code is the only number the agent ever reads (docs/results/tool-doors.md):

    question   "Find the code. In this house blue doors lead on. You are in room Q."
    door("blue")  → "room D: a red door and a blue door."
    door("red")   → "room K: a dead end. You go back to room D."
    door("blue")  → "room W: a red door and a blue door."
    door("blue")  → "room B: the code is 512."
    answer  512

Which colour leads on is drawn per task and said in the question (the policy has to read
it). Three decisions; a wrong door costs a turn and brings the agent back, and the budget
(`MAX_TURNS` = 5: three doors and the answer, plus one) tolerates one detour. Every episode
of a task starts in one state, and the states after right doors recur across its episodes
(GiGPO's anchor groups). A policy that ignores the question and picks a colour at random
succeeds about half the time (at most one wrong door of three); the warm start's
demonstrations come from such a walker (`explore_policy`, given 7 turns so that none of its
walks is filtered out), which teaches the format and the tool but not the colour.

- `load_suite()`: the 64 evaluation tasks, fixed.
- `generate_door_tasks(n, seed)`: a training stream, never an evaluation house.
- `gold_policy`, `empty_policy`, `explore_policy`; `door` (the tool's host function).
"""

from __future__ import annotations

import functools
import random
import re
import string
from typing import Any

from ..common import HostToolEpisode, Policy
from ..stream import draw_unseen
from ..task_types import ToolDecl, ToolTask
from .tool_mini import tool_call

EVAL_SIZE = 64
DECISIONS = 3
MAX_TURNS = DECISIONS + 2  # the doors and the answer, plus one detour
COLOURS = ("red", "blue")
_EVAL_SEED = "tool-doors-eval-v1"
SYSTEM_PROMPT = (
    "Find the code. Open doors with the door tool; the question says which colour leads on. "
    "When you know the code, reply with the code only."
)
SYSTEM_PROMPT_UNSAID = (
    "Find the code. Open doors with the door tool. When you know the code, reply with the code only."
)
DOOR_TOOL = ToolDecl(
    name="door",
    description="Go through a door of the room you are in.",
    parameters={
        "type": "object",
        "properties": {"colour": {"type": "string", "enum": list(COLOURS)}},
        "required": ["colour"],
    },
    handler="arborl.tasks.toy.tool_doors:door",
)
_CODE = re.compile(r"the code is (\d+)")


def door(colour: str, episode: HostToolEpisode) -> str:
    """The `door` tool: the episode's state is how many right doors the agent went through."""
    house: dict[str, Any] = episode.task.metadata
    at = int(episode.state.get("at", 0))
    if at >= DECISIONS:
        return "There are no more doors. Reply with the code."
    if colour not in COLOURS:
        return "There is no such door: red or blue."
    here = f"room {house['path'][at]}"
    if colour != house["lead"]:
        return f"room {house['dead'][at]}: a dead end. You go back to {here}."
    at = episode.state["at"] = at + 1
    there = f"room {house['path'][at]}"
    if at == DECISIONS:
        return f"{there}: the code is {house['code']}."
    return f"{there}: a red door and a blue door."


def _house(rng: random.Random, lead: str | None = None) -> dict[str, Any]:
    rooms = rng.sample(string.ascii_uppercase, 2 * DECISIONS + 1)
    drawn = rng.choice(COLOURS)
    # A lead that is not drawn and said (a fixed colour, or "any": drawn, unsaid) is the
    # agent's to find out.
    said = lead is None
    rule = f"In this house {drawn} doors lead on. " if said else ""
    return {
        "question": f"Find the code. {rule}You are in room {rooms[0]}.",
        "lead": lead if lead in COLOURS else drawn,
        "said": said,
        "path": rooms[: DECISIONS + 1],
        "dead": rooms[DECISIONS + 1 :],
        "code": rng.randrange(100, 1000),
    }


def _task(task_id: str, h: dict[str, Any]) -> ToolTask:
    return ToolTask(
        id=task_id,
        question=h["question"],
        system_prompt=SYSTEM_PROMPT if h["said"] else SYSTEM_PROMPT_UNSAID,
        tools=(DOOR_TOOL,),
        builtin_tools=(),
        answer=h["code"],
        verifier="numeric",
        metadata={
            "suite": "tool-doors",
            "kind": "doors",
            **{k: h[k] for k in ("lead", "path", "dead", "code")},
        },
    )


@functools.cache
def _eval_houses(lead: str | None = None) -> tuple[dict[str, Any], ...]:
    rng = random.Random(_EVAL_SEED if lead is None else f"{_EVAL_SEED}:{lead}")
    return tuple(_house(rng, lead) for _ in range(EVAL_SIZE))


def _name(lead: str | None) -> str:
    """The task ids' prefix for houses of `lead` (checked)."""
    if lead is not None and lead not in (*COLOURS, "any"):
        raise ValueError(f"lead is one of {(*COLOURS, 'any')}, got {lead!r}")
    return "tool-doors" if lead is None else f"tool-doors-{lead}"


def _key(h: dict[str, Any]) -> tuple[Any, ...]:
    # Questions alone recur (a colour and a first room), so a house is all of it.
    return (h["lead"], *h["path"], *h["dead"], h["code"])


def load_suite(lead: str | None = None) -> list[ToolTask]:
    """The 64 evaluation tasks of `tool-doors`; with `lead`, 64 other houses where that
    colour always leads on, unsaid (tool-mix's)."""
    name = _name(lead)
    return [_task(f"{name}/{i:03d}", h) for i, h in enumerate(_eval_houses(lead))]


def generate_door_tasks(n: int, seed: int = 0, lead: str | None = None) -> list[ToolTask]:
    """`n` training houses, reproducible by `seed`, none of them an evaluation house; with
    `lead`, that colour leads on in every one and no question says so (`load_suite(lead)`'s
    houses held out), or with `lead="any"` a colour drawn per house and not said: a walker's
    demonstrations on those favour no colour (on red houses every recovery is red)."""
    name = _name(lead)
    rng = random.Random(f"tool-doors-train:{seed}")
    houses = draw_unseen(n, lambda: _house(rng, lead), _key, _eval_houses(lead))
    return [_task(f"{name}-train/s{seed}-{i:06d}", h) for i, h in enumerate(houses)]


# ---- scripted policies ------------------------------------------------------------------
def _walker(task: ToolTask, pick: Any) -> Policy:
    """Answers the code once it is seen; after a dead end takes the other door; otherwise
    the door `pick(turn)` names."""

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        seen = [str(m.get("content", "")) for m in messages if m.get("role") in ("user", "tool")]
        code = _CODE.search(seen[-1])
        if code:
            return code.group(1)
        if "a dead end" in seen[-1]:
            # the door before was pick(turn - 1): a door taken after a dead end is never wrong
            wrong = pick(len(seen) - 1)
            return tool_call("door", {"colour": next(c for c in COLOURS if c != wrong)})
        return tool_call("door", {"colour": pick(len(seen))})

    return policy


def gold_policy(task: ToolTask) -> Policy:
    """Through the doors of the colour the question names: three doors, then the code."""
    return _walker(task, lambda turn: task.metadata["lead"])


def explore_policy(task: ToolTask, red: float | None = None) -> Policy:
    """A colour at random at every new room (seeded by the task and the turn), the other
    one after a dead end: the warm start's demonstrations, which show the format and the
    tool but not that the question names the colour. Needs 2 * DECISIONS + 1 turns. With
    `red`, the walker has a habit: it tries the red door (the one every room names first)
    with that probability."""

    def pick(turn: int) -> str:
        rng = random.Random(f"{task.id}:{turn}")
        return rng.choice(COLOURS) if red is None else ("red" if rng.random() < red else "blue")

    return _walker(task, pick)


def empty_policy(task: ToolTask) -> Policy:
    """Gives up at once (a final answer that is never right)."""
    return lambda messages, info: "I don't know."
