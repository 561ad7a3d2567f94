"""tool-cues and tool-cues-single: gold 100 % in six turns (the last door ends the episode), empty 0 %, the warm-start walker
at its combinatorial success rate, the room as the env's state (its text a function of the
room alone), training streams that hold no evaluation house, and each door turn labelled for
an oracle in the step's info."""

from __future__ import annotations

import asyncio
import itertools
from fractions import Fraction

import gymnasium
import pytest
from scripted_runs import run_policy

import arborl.envs  # noqa: F401 - registers the arborl/* ids
from arborl.tasks import get_suite
from arborl.tasks.toy import tool_cues as tc

SUITES = ("tool-cues", "tool-cues-single")


def _turns(episode) -> int:
    return sum(m["role"] == "assistant" for m in episode.messages)


@pytest.mark.parametrize("name", SUITES)
def test_gold_solves_every_house_in_six_turns_and_empty_none(name):
    suite = get_suite(name)
    tasks = suite.tasks()
    assert len(tasks) == tc.EVAL_SIZE and suite.max_turns == tc.MAX_TURNS == 10
    assert [t.id for t in tasks[:1]] == [f"{name}/000"]
    episodes = run_policy(tasks, tc.gold_policy, tc.MAX_TURNS)
    assert [e.total_reward for e in episodes] == [1.0] * len(tasks)
    assert {_turns(e) for e in episodes} == {tc.ROOMS}  # the sixth door ends it: no answer turn
    assert [e.total_reward for e in run_policy(tasks, tc.empty_policy, tc.MAX_TURNS)] == [0.0] * len(tasks)


def test_houses_mix_cues_under_one_rule_and_the_control_opens_blue_everywhere():
    cues, single = tc.load_suite(), tc.load_suite(single=True)
    assert all(len(set(t.metadata["cues"])) > 1 for t in cues[:10])  # a house mixes its cues
    by_cue = {(c, r) for t in cues for c, r in zip(t.metadata["cues"], t.metadata["right"], strict=True)}
    assert by_cue == {("circle", "red"), ("triangle", "blue"), ("square", "green")}  # one global rule
    assert {r for t in single for r in t.metadata["right"]} == {"blue"}
    assert {c for t in single for c in t.metadata["cues"]} == set(tc.CUES)  # cues shown, meaningless
    for t in cues + single:  # the rule is never said: the question shows the cue and all three doors
        assert not any(w in t.system_prompt for w in (*tc.COLOURS, *tc.CUES))
        assert t.question == f"Find the code. You are in {tc.describe(t.metadata, 0)}"


def _success_by_formula() -> Fraction:
    """Per room the right door is 1st, 2nd or 3rd of a random order (0, 1 or 2 locked doors, each
    1/3); success iff the six rooms' locked doors total <= 4 (ten turns, the sixth right door
    ends the episode): the coefficients of (1 + x + x²)⁶."""
    poly = [1]
    for _ in range(6):
        poly = [sum(poly[k - j] for j in range(3) if 0 <= k - j < len(poly)) for k in range(len(poly) + 2)]
    assert poly[:5] == [1, 6, 21, 50, 90] and sum(poly) == 3**6
    return Fraction(sum(poly[:5]), 3**6)


def test_the_walker_succeeds_at_its_combinatorial_rate_and_always_with_room():
    exact = _success_by_formula()
    assert exact == Fraction(168, 729) and float(exact) == tc.WALKER_SUCCESS
    tasks = tc.load_suite()
    rewards = list(
        itertools.chain.from_iterable(
            (
                e.total_reward
                for e in run_policy(tasks, lambda t, s=s: tc.explore_policy(t, seed=s), tc.MAX_TURNS)
            )
            for s in range(50)
        )
    )
    rate = sum(rewards) / len(rewards)
    # 3200 walks: the binomial's sd is 0.0074; the walks are seeded, so this never flakes
    assert abs(rate - float(exact)) < 0.02, rate
    roomy = run_policy(tasks, tc.explore_policy, 3 * tc.ROOMS)
    assert [e.total_reward for e in roomy] == [1.0] * len(tasks)  # every demonstration succeeds
    for e in roomy:  # it never tries a door it found locked in the room it is in
        doors = [m["content"] for m in e.messages if m["role"] == "assistant"]
        locked = [m["content"] for m in e.messages if m["role"] == "tool"]
        tried: set[str] = set()
        for call, result in zip(doors, locked, strict=True):
            colour = next(c for c in tc.COLOURS if f'"{c}"' in call)
            assert colour not in tried
            tried = tried | {colour} if "is locked" in result else set()
    assert {_turns(e) - tc.ROOMS for e in roomy} >= {1, 2, 3, 4, 5, 6}  # the cue is not followed


def test_training_streams_are_reproducible_and_hold_no_evaluation_house():
    def house(t):
        return (tuple(t.metadata["rooms"]), tuple(t.metadata["cues"]), t.answer)

    for single in (False, True):
        a, b = (
            tc.generate_cue_tasks(2000, seed=1, single=single),
            tc.generate_cue_tasks(2000, seed=1, single=single),
        )
        assert [house(t) for t in a] == [house(t) for t in b]
        assert not {house(t) for t in a} & {house(t) for t in tc.load_suite(single)}
        assert [house(t) for t in tc.generate_cue_tasks(5, seed=2, single=single)] != [
            house(t) for t in a[:5]
        ]
        assert {t.metadata["suite"] for t in a} == {"tool-cues-single" if single else "tool-cues"}
    assert tc.generate_cue_tasks(1)[0].id == "tool-cues-train/s0-000000"


def _walk(task, colours):
    """Per door: the tool result, the step's info and the episode's state after it."""

    async def go():
        env = gymnasium.make("arborl/Tool-v0").unwrapped
        _, info = await env.areset(options={"task": task})
        assert [t["function"]["name"] for t in info["tools"]] == ["door", "final_answer"]
        out = []
        for c in colours:
            obs, _, _, _, info = await env.astep(tc.tool_call("door", {"colour": c}))
            out.append((obs[0]["content"], info, dict(env._episode.state)))
        return out

    return asyncio.run(go())


def test_the_room_is_the_state_its_text_a_function_of_the_room_and_each_door_labelled():
    task = tc.load_suite()[0]
    right, rooms, cues = task.metadata["right"], task.metadata["rooms"], task.metadata["cues"]
    wrong = [next(c for c in tc.COLOURS if c != r) for r in right]
    doors = "A red door, a blue door and a green door."
    assert (
        task.question
        == f"Find the code. You are in room {rooms[0]}: a {cues[0]} is painted on the wall. {doors}"
    )
    straight = _walk(task, right)
    assert straight[0][0] == f"room {rooms[1]}: a {cues[1]} is painted on the wall. {doors}"
    assert straight[-1][0] == f"room {rooms[-1]}: the code is {task.answer}."
    assert [s for *_, s in straight] == [{"room": k} for k in range(1, tc.ROOMS + 1)]
    assert [i["step_label"] for _, i, _ in straight] == [1.0] * tc.ROOMS
    # locked doors on the way: the agent stays, is told so, and meets the same rooms
    detour = _walk(task, [wrong[0], right[0], wrong[1], wrong[1], right[1]])
    assert (
        detour[0][0]
        == f"The {wrong[0]} door is locked. You are still in {task.question.removeprefix('Find the code. You are in ')}"
    )
    # (the first room is reset's empty state: a locked door writes nothing)
    assert [s for *_, s in detour] == [{}, {"room": 1}, {"room": 1}, {"room": 1}, {"room": 2}]
    assert detour[1][0] == straight[0][0] and detour[4][0] == straight[1][0]  # the room's text
    assert detour[2][0].endswith(straight[0][0]) and detour[2][0] == detour[3][0]  # no history in it
    assert [i["step_label"] for _, i, _ in detour] == [-1.0, 1.0, -1.0, -1.0, 1.0]
    # two calls in one reply, a locked door among them: a wrong step
    both = asyncio.run(_two_calls(task, [right[0], wrong[1]]))
    assert both == (-1.0, {"room": 1})


async def _two_calls(task, colours):
    env = gymnasium.make("arborl/Tool-v0").unwrapped
    await env.areset(options={"task": task})
    _, _, _, _, info = await env.astep("\n".join(tc.tool_call("door", {"colour": c}) for c in colours))
    _, _, done, _, answer = await env.astep("I don't know.")
    assert done and "step_label" not in answer  # an answer is no door: unlabelled
    return info["step_label"], dict(env._episode.state)


def test_the_control_opens_blue_whatever_the_cue():
    task = tc.load_suite(single=True)[0]
    walked = _walk(task, ["red", "blue", "green", "blue"])
    assert [s for *_, s in walked] == [{}, {"room": 1}, {"room": 1}, {"room": 2}]
    assert [i["step_label"] for _, i, _ in walked] == [-1.0, 1.0, -1.0, 1.0]


def test_only_the_last_door_ends_the_episode_and_the_agent_cannot_end_it_itself():
    """The sixth right door ends the episode with the house's code as its answer (the goal is
    reached); an agent that sends an `episode` or `answer` of its own in the call reaches
    neither the tool's episode nor the end."""
    task = tc.load_suite()[0]
    right = task.metadata["right"]

    async def go(calls):
        env = gymnasium.make("arborl/Tool-v0").unwrapped
        await env.areset(options={"task": task})
        out = []
        for args in calls:
            _, reward, terminated, _, info = await env.astep(tc.tool_call("door", args))
            out.append((reward, terminated, info.get("answer")))
            if terminated:
                break
        return out

    straight = asyncio.run(go([{"colour": c} for c in right]))
    assert [t for _, t, _ in straight] == [False] * (tc.ROOMS - 1) + [True]
    assert straight[-1] == (1.0, True, str(task.answer))
    forged = asyncio.run(
        go(
            [
                {"colour": right[0], "episode": {"answer": str(task.answer)}},
                {"colour": right[0], "answer": str(task.answer)},
            ]
        )
    )
    assert all(not terminated and reward == 0.0 for reward, terminated, _ in forged), forged
