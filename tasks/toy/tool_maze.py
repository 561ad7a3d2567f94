"""`tool-maze`: find a code behind three doors, where every wrong door costs a turn.

A multi-turn suite in which step-level credit matters. Each task is a small maze of rooms,
searched one room at a time through the `search` tool of `arborl/Tool-v0`:

    question   "Find the code. You are in room17: a blue door leads to room85, a red door leads to room42."
    search("room42")  → "room42: a red door leads to room63, a blue door leads to room29."
    search("room63")  → "room63: a blue door leads to room71, a red door leads to room50."
    search("room50")  → "room50: the code is 512."
    answer  512

Three decision points, each between a red door (leads on) and a blue one (a dead end:
"room85: a dead end. Go back."). The system prompt says which colour leads on. A wrong door
is recoverable — the other door's room is named in the result the agent already saw — but
costs a turn, and the suite's budget (`MAX_TURNS` = 5: three searches and the answer, plus
one) tolerates one detour only. So:

- every episode of a task starts from the same state, and the states after each right door
  recur across a task's episodes (GiGPO's anchor groups are not singletons);
- a policy that picks a door at random succeeds half the time (at most one wrong door of
  three), and a warm start on demonstrations of such an explorer (`explore_policy`, run
  with a larger turn budget so that every demonstration succeeds and none is filtered for
  its choices) learns the format and the tools but not the colour: what is left is for RL
  to learn from reward, and which turn earned it is the question step credit answers.

Room numbers are two digits and the code three (digits are one token each with the tiny
model's tokenizer): with one-digit rooms a guessed room is usually a real one past a
decision, and GRPO learned to guess (docs/results/tool-maze.md).
A door names its room as a query does (`room42`), so a query is the door's room copied;
every room is a document of the task's own corpus, its name in its title and text, so
`search(room, k=1)` ranks it above the room whose door names it.

- `load_suite()`: the 64 evaluation tasks, fixed.
- `generate_maze_tasks(n, seed)`: a training stream, never an evaluation maze.
- `gold_policy`, `empty_policy`, `explore_policy` (a door at random, seeded by the task).
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable
from typing import Any

from ..common import Policy
from ..stream import draw_unseen
from ..task_types import Document, ToolTask
from .tool_mini import tool_call

EVAL_SIZE = 64
DECISIONS = 3
MAX_TURNS = DECISIONS + 2  # the searches and the answer, plus one detour
_EVAL_SEED = "tool-maze-eval-v1"
SYSTEM_PROMPT = (
    "Find the code. Red doors lead on; blue doors lead to dead ends. Search a room by its "
    "name, e.g. room42. When you know the code, reply with the code only."
)
_DOORS = re.compile(r"a (red|blue) door leads to room(\d+)")
_CODE = re.compile(r"the code is (\d+)")


def _doors(red: int, blue: int, rng: random.Random) -> str:
    doors = [f"a red door leads to room{red}", f"a blue door leads to room{blue}"]
    rng.shuffle(doors)
    return ", ".join(doors)


def _maze(rng: random.Random) -> dict[str, Any]:
    """Rooms on the path (start, then one per decision), a dead end per decision, the code."""
    rooms = rng.sample(range(10, 100), 2 * DECISIONS + 1)
    path, dead = rooms[: DECISIONS + 1], rooms[DECISIONS + 1 :]
    code = rng.randrange(100, 1000)
    texts = {}
    for i in range(DECISIONS):
        texts[path[i]] = _doors(path[i + 1], dead[i], rng)
    docs = [
        Document(id=f"room{r}", title=f"room{r}", text=f"room{r}: {texts[r]}.") for r in path[1:DECISIONS]
    ]
    docs.append(
        Document(id=f"room{path[-1]}", title=f"room{path[-1]}", text=f"room{path[-1]}: the code is {code}.")
    )
    docs += [Document(id=f"room{r}", title=f"room{r}", text=f"room{r}: a dead end. Go back.") for r in dead]
    rng.shuffle(docs)
    question = f"Find the code. You are in room{path[0]}: {texts[path[0]]}."
    return {"question": question, "code": code, "path": path, "dead": dead, "docs": tuple(docs)}


def _task(task_id: str, m: dict[str, Any]) -> ToolTask:
    return ToolTask(
        id=task_id,
        question=m["question"],
        system_prompt=SYSTEM_PROMPT,
        builtin_tools=("search",),
        answer=m["code"],
        verifier="numeric",
        corpus=m["docs"],
        metadata={"suite": "tool-maze", "kind": "maze", "path": m["path"], "dead": m["dead"]},
    )


@functools.lru_cache(maxsize=1)
def _eval_mazes() -> tuple[dict[str, Any], ...]:
    rng = random.Random(_EVAL_SEED)
    return tuple(_maze(rng) for _ in range(EVAL_SIZE))


def load_suite() -> list[ToolTask]:
    """The 64 evaluation tasks of `tool-maze`."""
    return [_task(f"tool-maze/{i:03d}", m) for i, m in enumerate(_eval_mazes())]


def generate_maze_tasks(n: int, seed: int = 0) -> list[ToolTask]:
    """`n` training mazes, reproducible by `seed`, none of them an evaluation maze."""
    rng = random.Random(f"tool-maze-train:{seed}")
    mazes = draw_unseen(n, lambda: _maze(rng), lambda m: m["question"], _eval_mazes())
    return [_task(f"tool-maze-train/s{seed}-{i:06d}", m) for i, m in enumerate(mazes)]


# ---- scripted policies ------------------------------------------------------------------
def _observations(messages: list[dict[str, Any]]) -> list[str]:
    """The question, then every tool result, in order."""
    return [str(m.get("content", "")) for m in messages if m.get("role") in ("user", "tool")]


def _walker(choose: Callable[[list[tuple[str, int]], int], int]) -> Policy:
    """A policy that reads the newest observation: the code → answer it; doors → search the
    room `choose(doors, turn)` picks; a dead end → search the other door of the room before."""

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        obs = _observations(messages)
        code = _CODE.search(obs[-1])
        if code:
            return code.group(1)
        doors = [(c, int(r)) for c, r in _DOORS.findall(obs[-1])]
        if doors:
            return tool_call("search", {"query": f"room{choose(doors, len(obs))}", "k": 1})
        # a dead end: the room before it is the newest observation with doors; take the door
        # not yet taken
        searched = {int(x) for o in obs[1:] for x in re.findall(r"^room(\d+):", o, re.M)}
        for o in reversed(obs[:-1]):
            rooms = [int(r) for _, r in _DOORS.findall(o)]
            if rooms:
                return tool_call(
                    "search", {"query": f"room{next(r for r in rooms if r not in searched)}", "k": 1}
                )
        return "I don't know."

    return policy


def gold_policy(task: ToolTask) -> Policy:
    """Through the red doors: three searches, then the code."""
    return _walker(lambda doors, turn: next(r for c, r in doors if c == "red"))


def explore_policy(task: ToolTask) -> Policy:
    """A door at random at every decision (seeded by the task and the turn), back after a
    dead end: the warm start's demonstrations, which show the format and the tools but not
    which colour leads on. Needs a turn budget of 2 * DECISIONS + 1 to always finish."""
    return _walker(lambda doors, turn: random.Random(f"{task.id}:{turn}").choice(doors)[1])


def empty_policy(task: ToolTask) -> Policy:
    """Gives up at once (a final answer that is never right)."""
    return lambda messages, info: "I don't know."
