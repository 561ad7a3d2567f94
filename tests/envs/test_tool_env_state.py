"""`arborl/Tool-v0`'s state hash is the state the agent observes, not the path to it: where
host tools keep episode state (tool-doors' room) two paths to one room are one state, and
where the tools keep none (search) what the agent has learned, its history, is the state.
The expected equalities come from the tasks' own definitions (the room a tool result says
the agent stands in, the items in a pocket), not from the hash code. No sandbox is used."""

from __future__ import annotations

import asyncio
import re

import gymnasium

import arborl.envs  # noqa: F401 - registers arborl/Tool-v0
from arborl.tasks import Document, ToolTask
from arborl.tasks.toy import tool_doors as tdr
from arborl.tasks.toy.tool_mini import tool_call

CORPUS = [
    Document(id="d1", title="Mount Everest", text="Mount Everest is 8,849 metres high, in the Himalayas."),
    Document(id="d2", title="Mont Blanc", text="Mont Blanc rises 4,806 metres in the Alps."),
]


def host_pocket(item: str, episode) -> str:
    """A host tool whose state mixes key and value types: the set of items in a pocket, their
    count under an int key, a tuple key holding None."""
    episode.state.setdefault("pocket", set()).add(item)
    episode.state[0] = len(episode.state["pocket"])
    episode.state[("note",)] = None
    return "ok"


POCKET = {
    "name": "pocket",
    "description": "Put an item in your pocket.",
    "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
    "handler": f"{__name__}:host_pocket",
}


def walk(task: ToolTask, calls: list[tuple[str, dict]]) -> tuple[list[str], list[str]]:
    """One episode of `task` through the real env: the observation and the state hash at the
    start and after each call."""

    async def go():
        env = gymnasium.make("arborl/Tool-v0").unwrapped
        try:
            obs, info = await env.areset(options={"task": task})
            seen, hashes = [obs[-1]["content"]], [info["state_hash"]]
            for name, args in calls:
                obs, _, _, _, info = await env.astep(tool_call(name, args))
                seen.append(obs[0]["content"])
                hashes.append(info["state_hash"])
            return seen, hashes
        finally:
            await env.aclose()

    return asyncio.run(go())


def room(text: str) -> str:
    """The room the agent stands in after `text`, as tool-doors says it: the last room named
    ("room K: a dead end. You go back to room D." → D; the question: "You are in room Q.")."""
    return re.findall(r"room ([A-Z])", text)[-1]


def test_a_room_reached_by_two_paths_is_one_state_and_rooms_differ():
    task = tdr.load_suite("blue")[0]  # blue doors lead on
    blue, red = ("door", {"colour": "blue"}), ("door", {"colour": "red"})
    walks = [[blue], [red, blue], [red, red, blue], [blue, red, blue], [blue, blue], [red, blue, red, blue]]
    by_room: dict[str, set[str]] = {}
    for calls in walks:
        seen, hashes = walk(task, calls)
        for text, h in zip(seen, hashes, strict=True):
            by_room.setdefault(room(text), set()).add(h)
    path = task.metadata["path"]
    assert set(by_room) == set(path[:3])  # the rooms these walks stand in (the code room: none)
    assert all(len(hashes) == 1 for hashes in by_room.values())  # one room, one state
    assert len(set().union(*by_room.values())) == len(by_room)  # other rooms, other states

    # the paths of the issue: blue at once, or red (a dead end, back) and then blue
    direct, detour = walk(task, [blue])[1], walk(task, [red, blue])[1]
    assert detour[1] == direct[0] and detour[2] == direct[1] != direct[0]
    refused = walk(task, [("door", {"colour": "green"})])[1]  # no such door: no move
    assert refused[1] == refused[0] == direct[0]


def test_history_is_the_state_where_tools_keep_none():
    """search keeps no state: what the agent learned is the state, in any order."""
    task = ToolTask(id="s", question="q", corpus=CORPUS, builtin_tools=("search",))
    everest, alps = ("search", {"query": "Everest"}), ("search", {"query": "Alps"})
    _, one = walk(task, [everest, alps])
    _, other = walk(task, [alps, everest])
    assert one[0] == other[0] and one[2] == other[2]  # the same two results learned
    assert len({one[0], one[1], other[1], one[2]}) == 4  # nothing, either one alone, both


def test_a_house_with_search_is_its_room_and_what_was_searched():
    task = tdr.load_suite("blue")[0].model_copy(update={"corpus": CORPUS, "builtin_tools": ("search",)})
    blue, red, look = ("door", {"colour": "blue"}), ("door", {"colour": "red"}), ("search", {"query": "Alps"})
    _, a = walk(task, [blue, look])
    _, b = walk(task, [red, look, blue])
    _, c = walk(task, [blue])
    assert a[2] == b[3]  # the same room, the same search learned
    assert c[1] != a[2] and c[1] == walk(task, [red, blue])[1][2]  # the room alone: no search


def test_host_tool_state_of_mixed_types_hashes_canonically():
    """The pocket's state is its set of items: the order they went in does not matter, the
    items do, and keys and values of mixed types (int, str, tuple; set, None) hash."""
    task = ToolTask(id="p", question="Fill your pocket.", tools=[POCKET], builtin_tools=(), answer="x")
    key, coin = ("pocket", {"item": "key"}), ("pocket", {"item": "coin"})
    _, ab = walk(task, [key, coin])
    _, ba = walk(task, [coin, key])
    _, again = walk(task, [key, key, coin])
    assert "" not in ab + ba + again  # no hash failed
    assert ab[2] == ba[2] == again[3]  # {key, coin}, however it was filled
    assert len({ab[0], ab[1], ba[1], ab[2]}) == 4 and again[1] == again[2] == ab[1]
