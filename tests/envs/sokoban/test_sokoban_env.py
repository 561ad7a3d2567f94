"""arborl/Sokoban-v0: verl-agent's observation and reward through the Gymnasium API, async
stepping with state per episode, bad replies, and the suite through `arborl eval`.

Expected values come from the references (see tests/tasks/sokoban/test_sokoban_rules.py):
gym-sokoban's sokoban_env.py:34-37 (-0.1 a step, +1 on a target, +10 solved); verl-agent's
sokoban/env.py:95 (-0.1 for no move), run_sokoban.sh:50 (0.1 more for an invalid reply),
run_sokoban.sh:57 (15 turns), prompts/sokoban.py (the templates), memory.py:79 (history lines).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import gymnasium
import pytest

import arborl.envs  # noqa: F401 - registers the ids
from arborl.tasks import get_suite
from arborl.tasks.sokoban.game import push, render_grid
from arborl.tasks.sokoban.suite import gold_policy

STEP, ON, DONE, NO_MOVE, INVALID, TURNS = -0.1, 1.0, 10.0, -0.1, 0.1, 15


@pytest.fixture
def tasks():
    return get_suite("sokoban-6x6").tasks()[:6]


def reply(move: str) -> str:
    return f"<think>plan</think><action>{move.lower()}</action>"


def test_the_first_observation_is_verl_agents_prompt_around_the_grid(tasks):
    env = gymnasium.make("arborl/Sokoban-v0")
    obs, _info = env.reset(options={"task": tasks[0]})
    (msg,) = obs
    grid = render_grid(tasks[0].board())
    assert msg["role"] == "user"
    assert msg["content"].startswith("\nYou are an expert agent operating in the Sokoban environment.")
    assert f"Your current observation is:\n{grid}\nYour admissible actions are" in msg["content"]
    assert "within <think> </think> tags. \n" in msg["content"]
    obs, *_ = env.step(reply(tasks[0].solution[0]))
    text = obs[0]["content"]
    assert (
        "Prior to this step, you have already taken 1 step(s). Below are the most recent 1 observaitons"
        in text
    )
    assert f"[Observation 1: '{grid}', Action 1: '{tasks[0].solution[0]}']" in text
    assert "You are now at step 2 and your current observation is:" in text


def test_the_gold_solution_earns_verl_agents_shaped_reward(tasks):
    env = gymnasium.make("arborl/Sokoban-v0")
    for task in tasks:
        env.reset(options={"task": task})
        rewards, terminated = [], False
        for move in task.solution:
            _, r, terminated, truncated, info = env.step(reply(move))
            rewards.append(r)
        assert terminated and not truncated and info["won"]
        assert rewards[:-1] == pytest.approx([STEP] * (len(rewards) - 1))
        assert rewards[-1] == pytest.approx(STEP + ON + DONE)


def test_silence_is_an_invalid_no_move_every_turn_until_the_turn_budget(tasks):
    env = gymnasium.make("arborl/Sokoban-v0")
    env.reset(options={"task": tasks[0]})
    for _turn in range(1, TURNS + 1):
        _, r, terminated, truncated, info = env.step("")
        assert r == pytest.approx(NO_MOVE - INVALID) and not terminated
        assert info["action"] == "Still" and info["format_error"] and not info["is_action_valid"]
    assert truncated and info["truncated_by"] == "max_steps"
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step(reply("up"))


@pytest.mark.parametrize("junk", [b"\xff\xfe<action>up", None, "<action>" * 100_000, "\ud800", 42])
def test_junk_replies_are_the_agents_mistake_never_an_exception(junk, tasks):
    env = gymnasium.make("arborl/Sokoban-v0")
    env.reset(options={"task": tasks[0]})
    _, r, terminated, truncated, _info = env.step(junk)
    assert r == pytest.approx(NO_MOVE - INVALID) and not (terminated or truncated)


def test_equal_boards_hash_equal_across_episodes_and_differ_after_a_move(tasks):
    a, b = gymnasium.make("arborl/Sokoban-v0"), gymnasium.make("arborl/Sokoban-v0")
    _, ia = a.reset(options={"task": tasks[1]})
    _, ib = b.reset(options={"task": tasks[1]})
    assert ia["state_hash"] == ib["state_hash"]
    *_, moved = a.step(reply(tasks[1].solution[0]))
    *_, stayed = b.step("<think>wait</think><action>still</action>")
    assert moved["state_hash"] != ia["state_hash"] and stayed["state_hash"] == ib["state_hash"]


def test_concurrent_async_episodes_keep_their_own_boards(tasks):
    async def play(task):
        env = gymnasium.make("arborl/Sokoban-v0")
        await env.unwrapped.areset(options={"task": task})
        total = 0.0
        for move in task.solution:
            await asyncio.sleep(0)  # let the other episodes step in between
            _, r, terminated, _, _ = await env.unwrapped.astep(reply(move))
            total += r
        return terminated, total

    async def main():
        return await asyncio.gather(*(play(t) for t in tasks))

    for task, (terminated, total) in zip(tasks, asyncio.run(main()), strict=True):
        assert terminated
        assert total == pytest.approx(STEP * len(task.solution) + ON + DONE)


def test_the_gold_policy_solves_from_the_latest_observation_alone():
    """A context that dropped the earlier turns (a sliding window, a summary, a harness that
    sends only the newest prompt) still gets the right move: the policy reads the board."""
    env = gymnasium.make("arborl/Sokoban-v0")
    rooms = [t for t in get_suite("sokoban-6x6").tasks()[:30] if len(set(t.solution)) > 1]
    assert len(rooms) >= 10  # rooms whose moves differ: replaying the first move every turn fails
    for task in rooms:
        policy = gold_policy(task)
        obs, info = env.reset(options={"task": task})
        for _turn in range(len(task.solution)):
            obs, _r, terminated, truncated, info = env.step(policy(list(obs), info))
            if terminated or truncated:
                break
        assert terminated and info["won"], task.id


def test_the_gold_policy_without_a_board_says_what_it_needs(tasks):
    with pytest.raises(ValueError, match="no user message shows a Sokoban board"):
        gold_policy(tasks[0])([{"role": "user", "content": "hello"}], {})


def test_the_chat_variant_shows_the_first_prompt_then_each_new_board_alone(tasks):
    """arborl/SokobanChat-v0: verl-agent's first prompt word for word, then each turn the new
    board in the first prompt's words, nothing else (the chat holds the rules and history)."""
    task = tasks[0]
    chat, verl = gymnasium.make("arborl/SokobanChat-v0"), gymnasium.make("arborl/Sokoban-v0")
    (first,), _ = chat.reset(options={"task": task})
    assert first == verl.reset(options={"task": task})[0][0]
    board = task.board()
    for move in task.solution:
        (msg,), r, terminated, truncated, info = chat.step(reply(move))
        _, r_verl, term_verl, _, info_verl = verl.step(reply(move))
        board = push(board, move)
        assert msg == {"role": "user", "content": f"Your current observation is:\n{render_grid(board)}"}
        assert (r, terminated, info["state_hash"]) == (r_verl, term_verl, info_verl["state_hash"])
    assert terminated and info["won"] and not truncated


@pytest.mark.parametrize(
    "forged",
    [
        "<think>done</think>Your current observation is:\n # \t √ \t # \t<action>still</action>",
        "<think>x</think><action>up</action>" * 50_000,
        "\ud800<action>\x00</action>",
    ],
)
def test_the_chat_variant_pays_nothing_for_a_forged_board_or_junk(forged, tasks):
    """A reply that writes a solved board into its own text, or floods, or holds bytes no
    parser expects: the reward and the next board are the game's, from the projected move
    alone, never from the reply's text, and nothing raises."""
    task = next(t for t in tasks if len(t.solution) > 1)
    chat, verl = gymnasium.make("arborl/SokobanChat-v0"), gymnasium.make("arborl/Sokoban-v0")
    chat.reset(options={"task": task})
    verl.reset(options={"task": task})
    (msg,), r, terminated, truncated, info = chat.step(forged)
    _, r_verl, _, _, info_verl = verl.step(forged)
    assert not terminated and not truncated and not info["won"]
    assert (r, info["state_hash"]) == (r_verl, info_verl["state_hash"]) and r < 0
    assert msg["content"].startswith("Your current observation is:\n") and "√" not in msg["content"]


def test_the_gold_policy_solves_the_chat_variant_from_the_whole_chat(tasks):
    env = gymnasium.make("arborl/SokobanChat-v0")
    for task in tasks:
        policy = gold_policy(task)
        obs, info = env.reset(options={"task": task})
        chat = list(obs)
        for _turn in range(task.max_steps):
            answer = policy(chat, info)
            obs, _r, terminated, truncated, info = env.step(answer)
            chat += [{"role": "assistant", "content": answer}, *obs]
            if terminated or truncated:
                break
        assert terminated and info["won"], task.id


def test_the_tokenizer_text_never_shows_a_held_out_room():
    from arborl.tasks.sokoban.prompt import current_grid
    from arborl.tasks.sokoban.suite import tokenizer_text

    held_out = {t.rows for t in get_suite("sokoban-6x6").tasks()}
    shown = {current_grid(line) for line in tokenizer_text(40)} - {None}
    assert len(shown) > 40 and not shown & held_out


@pytest.mark.parametrize(
    ("suite", "agent", "rate"),
    [("sokoban-6x6", "gold", 1.0), ("sokoban-6x6", "empty", 0.0), ("sokoban-6x6-chat", "gold", 1.0)],
)
def test_arborl_eval_scores_gold_100_and_empty_0(suite, agent, rate, tmp_path):
    run = tmp_path / agent
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "arborl.cli.main",
            "eval",
            f"suite={suite}",
            f"agent={agent}",
            f"run.dir={run}",
            "report=false",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["samples"] == 100 and summary["resolved_rate"] == rate, summary
