"""tool-maze: gold 100 %, empty 0 %, a random door about half the time within the suite's
budget, and the states that step credit groups by recur across a task's episodes."""

from __future__ import annotations

import asyncio

import gymnasium
import pytest
from scripted_runs import run_policy

from arborl.tasks import get_suite
from arborl.tasks.toy import tool_maze as tmz


def _run(tasks, factory, max_turns=tmz.MAX_TURNS):
    return run_policy(tasks, factory, max_turns)


@pytest.fixture(scope="module")
def suite():
    return get_suite("tool-maze")


def test_gold_solves_every_task_in_three_searches_and_empty_none(suite):
    tasks = suite.tasks()
    assert len(tasks) == tmz.EVAL_SIZE and suite.max_turns == tmz.MAX_TURNS
    episodes = _run(tasks, tmz.gold_policy)
    assert [e.total_reward for e in episodes] == [1.0] * len(tasks)
    assert {sum(m["role"] == "assistant" for m in e.messages) for e in episodes} == {tmz.DECISIONS + 1}
    assert [e.total_reward for e in _run(tasks, tmz.empty_policy)] == [0.0] * len(tasks)


def test_a_random_door_succeeds_about_half_the_time_and_always_with_room_to_go_back(suite):
    tasks = suite.tasks()
    tight = [e.total_reward for e in _run(tasks, tmz.explore_policy)]
    assert 0.3 <= sum(tight) / len(tight) <= 0.7  # at most one wrong door of three: 1/2
    roomy = _run(tasks, tmz.explore_policy, max_turns=2 * tmz.DECISIONS + 1)
    assert [e.total_reward for e in roomy] == [1.0] * len(tasks)  # every demonstration succeeds
    detours = [sum(m["role"] == "assistant" for m in e.messages) - tmz.DECISIONS - 1 for e in roomy]
    assert set(detours) == {0, 1, 2, 3}  # the demonstrations do not show which colour leads on


def test_training_stream_is_reproducible_and_holds_no_evaluation_maze(suite):
    a, b = tmz.generate_maze_tasks(50, seed=1), tmz.generate_maze_tasks(50, seed=1)
    assert [t.question for t in a] == [t.question for t in b]
    assert not {t.question for t in a} & {t.question for t in suite.tasks()}
    assert [t.question for t in tmz.generate_maze_tasks(5, seed=2)] != [t.question for t in a[:5]]


def test_states_recur_across_a_tasks_episodes(suite):
    """Every episode of a task starts in one state, and episodes that took the right first
    door share the state after it (GiGPO's anchor states); a dead end is a state of its own."""
    task = suite.tasks()[0]
    right, wrong = task.metadata["path"][1], task.metadata["dead"][0]

    async def state_after(rooms):
        env = gymnasium.make("arborl/Tool-v0").unwrapped
        await env.areset(options={"task": task})
        hashes = [await env.state_hash()]
        for r in rooms:
            await env.astep(tmz.tool_call("search", {"query": f"room{r}", "k": 1}))
            hashes.append(await env.state_hash())
        return hashes

    a = asyncio.run(state_after([right]))
    b = asyncio.run(state_after([right]))
    c = asyncio.run(state_after([wrong, right]))
    assert a[0] == b[0] == c[0]  # one start state
    assert a[1] == b[1] and c[1] != a[1]  # the right door's state recurs; the dead end is its own
