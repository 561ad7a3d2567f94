"""tool-doors: gold 100 %, empty 0 %, a colour at random about half the time within the
suite's budget, the room as the env's state (nothing to copy, nothing to guess), and the
states that step credit groups by recur across a task's episodes."""

from __future__ import annotations

import asyncio

import gymnasium
import pytest
from scripted_runs import run_policy

from arborl.tasks import get_suite
from arborl.tasks.toy import tool_doors as tdr


def _run(tasks, factory, max_turns=tdr.MAX_TURNS):
    return run_policy(tasks, factory, max_turns)


@pytest.fixture(scope="module")
def suite():
    return get_suite("tool-doors")


def test_gold_solves_every_task_through_three_doors_and_empty_none(suite):
    tasks = suite.tasks()
    assert len(tasks) == tdr.EVAL_SIZE and suite.max_turns == tdr.MAX_TURNS
    assert {t.metadata["lead"] for t in tasks} == {"red", "blue"}  # the question has to be read
    episodes = _run(tasks, tdr.gold_policy)
    assert [e.total_reward for e in episodes] == [1.0] * len(tasks)
    assert {sum(m["role"] == "assistant" for m in e.messages) for e in episodes} == {tdr.DECISIONS + 1}
    assert [e.total_reward for e in _run(tasks, tdr.empty_policy)] == [0.0] * len(tasks)


def test_a_random_colour_succeeds_about_half_the_time_and_always_with_room_to_go_back(suite):
    tasks = suite.tasks()
    tight = [e.total_reward for e in _run(tasks, tdr.explore_policy)]
    assert 0.3 <= sum(tight) / len(tight) <= 0.7  # at most one wrong door of three: 1/2
    roomy = _run(tasks, tdr.explore_policy, max_turns=2 * tdr.DECISIONS + 1)
    assert [e.total_reward for e in roomy] == [1.0] * len(tasks)  # every demonstration succeeds
    detours = [sum(m["role"] == "assistant" for m in e.messages) - tdr.DECISIONS - 1 for e in roomy]
    assert set(detours) == {0, 1, 2, 3}  # the demonstrations do not follow the question's colour


def test_training_stream_is_reproducible_and_holds_no_evaluation_house(suite):
    def house(t):  # questions alone recur (a colour and a first room)
        return (t.question, tuple(t.metadata["path"]), tuple(t.metadata["dead"]), t.answer)

    a, b = tdr.generate_door_tasks(2000, seed=1), tdr.generate_door_tasks(2000, seed=1)
    assert [house(t) for t in a] == [house(t) for t in b]
    assert not {house(t) for t in a} & {house(t) for t in suite.tasks()}
    assert [house(t) for t in tdr.generate_door_tasks(5, seed=2)] != [house(t) for t in a[:5]]
    assert {t.question for t in a} & {t.question for t in suite.tasks()}  # the same first rooms, other houses


def _walk(task, colours):
    """Tool results and state hashes of one episode that opens `colours` in turn."""

    async def go():
        env = gymnasium.make("arborl/Tool-v0").unwrapped
        _, info = await env.areset(options={"task": task})
        assert [t["function"]["name"] for t in info["tools"]] == ["door", "final_answer"]  # no search
        results, hashes = [], [await env.state_hash()]
        for c in colours:
            obs, *_ = await env.astep(tdr.tool_call("door", {"colour": c}))
            results.append(obs[0]["content"])
            hashes.append(await env.state_hash())
        return results, hashes

    return asyncio.run(go())


def test_the_room_is_the_envs_state_and_states_recur_across_a_tasks_episodes(suite):
    task = suite.tasks()[0]
    lead = task.metadata["lead"]
    other = next(c for c in tdr.COLOURS if c != lead)
    path, dead = task.metadata["path"], task.metadata["dead"]
    right, _ = _walk(task, [lead, lead, lead, lead])
    assert right[0] == f"room {path[1]}: a red door and a blue door."
    assert right[2] == f"room {path[3]}: the code is {task.metadata['code']}."
    assert right[3].startswith("There are no more doors")
    detour, hashes = _walk(task, [other, lead])
    assert detour == [f"room {dead[0]}: a dead end. You go back to room {path[0]}.", right[0]]
    _, again = _walk(task, [lead])
    _, first = _walk(task, [lead])
    assert hashes[0] == again[0] == first[0]  # one start state
    assert again[1] == first[1] != hashes[1]  # the right door's state recurs; the dead end is its own
    bad, hashes = _walk(task, ["green", lead])
    assert "invalid arguments for `door`" in bad[0] and bad[1] == right[0]  # no door, no move


def test_a_fixed_lead_is_never_said_and_its_houses_are_held_out_too():
    tasks = tdr.load_suite("blue")
    assert [t.id for t in tasks[:1]] == ["tool-doors-blue/000"] and len(tasks) == tdr.EVAL_SIZE
    assert {t.metadata["lead"] for t in tasks} == {"blue"}
    assert not any("blue" in t.question or "blue" in t.system_prompt for t in tasks)
    assert [e.total_reward for e in _run(tasks, tdr.gold_policy)] == [1.0] * len(tasks)
    train = tdr.generate_door_tasks(3000, seed=0, lead="blue")
    assert {t.metadata["lead"] for t in train} == {"blue"}
    key = lambda t: (t.question, tuple(t.metadata["path"]), t.answer)  # noqa: E731
    assert not {key(t) for t in train} & {key(t) for t in tasks}
    with pytest.raises(ValueError, match="lead"):
        tdr.generate_door_tasks(1, lead="green")
