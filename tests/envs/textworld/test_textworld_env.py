"""`arborl/TextWorld-v0` against TextWorld's own stepping loop (`textworld.start`), on games
tw-make's challenges generate (cached under $ARBORL_CACHE/textworld after the first run)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gymnasium
import pytest
import textworld

import arborl.envs  # noqa: F401  (registers the ids)
from arborl.envs.textworld import GameCrashed, parse_command
from arborl.tasks import get_suite
from arborl.tasks.textworld import TextWorldTask, ensure_game
from arborl.tasks.textworld.policies import walkthrough


@pytest.fixture(scope="module")
def cooking() -> TextWorldTask:
    return get_suite("textworld-cooking").tasks()[0]


@pytest.fixture(scope="module")
def coin() -> TextWorldTask:
    return get_suite("textworld-coin").tasks()[0]


def make_env(**kwargs):
    return gymnasium.make("arborl/TextWorld-v0", **kwargs)


def textworld_own_run(task: TextWorldTask, commands: list[str]) -> list[tuple[str, int, bool]]:
    """(feedback, score, done) after each command, from TextWorld's own loop."""
    infos = textworld.EnvInfos(score=True, max_score=True, won=True)
    env = textworld.start(str(ensure_game(task)), request_infos=infos)
    env.reset()
    out = []
    for c in commands:
        state, score, done = env.step(c)
        out.append((state.feedback, score, done))
    env.close()
    return out


def running(pid: int) -> bool:
    """Whether the process exists and is not a zombie (its parent reaps it in its own time)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_the_walkthrough_scores_what_textworld_scores(cooking):
    commands = walkthrough(cooking)
    reference = textworld_own_run(cooking, commands)
    env = make_env(admissible_commands=False)
    env.reset(options={"task": cooking})
    rewards, total = [], 0.0
    for command, (feedback, score, done) in zip(commands, reference, strict=True):
        obs, reward, terminated, truncated, info = env.step(f"I will do that. <action>{command}</action>")
        assert obs[0]["content"] == feedback.strip()
        assert info["score"] == score and terminated == done and not truncated
        rewards.append(reward)
        total += reward
    assert reference[-1][2] and reference[-1][1] == info["max_score"] > 1  # won, several points
    assert total == pytest.approx(1.0)
    assert sum(r > 0 for r in rewards) == info["max_score"]  # one step per point (cooking scores 1 a step)
    env.close()


def textworld_admissible(task: TextWorldTask, commands: list[str]) -> list[str]:
    """The admissible commands after `commands`, from TextWorld's own loop."""
    env = textworld.start(str(ensure_game(task)), request_infos=textworld.EnvInfos(admissible_commands=True))
    state = env.reset()
    for c in commands:
        state, _, _ = env.step(c)
    env.close()
    return list(state.admissible_commands)


def test_the_admissible_commands_are_textworlds_at_reset_and_after_every_step(coin):
    env = make_env()
    _, info = env.reset(options={"task": coin})
    assert info["admissible_commands"] == textworld_admissible(coin, [])
    played = []
    for command in walkthrough(coin)[:2]:
        played.append(command)
        obs, *_, info = env.step(f"<action>{command}</action>")
        assert info["admissible_commands"] == textworld_admissible(coin, played)
        assert obs[0]["content"].endswith("\n".join(f"- {c}" for c in info["admissible_commands"]))
    env.close()
    env = make_env(admissible_commands=False)
    env.reset(options={"task": coin})
    assert env.step("look")[4]["admissible_commands"] is None  # not requested from the game
    env.close()


def test_an_unknown_command_is_the_games_answer_not_an_error(coin):
    env = make_env()
    _, info = env.reset(options={"task": coin})
    assert "look" in info["admissible_commands"]
    obs, reward, terminated, truncated, info = env.step("xyzzy the coin")
    expected = textworld_own_run(coin, ["xyzzy the coin"])[0][0].strip()
    assert obs[0]["content"].startswith(expected) and "Admissible commands:" in obs[0]["content"]
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["admissible"] is False and "env_error" not in info and "sandbox_error" not in info
    obs, *_ = env.step("")  # an empty reply: the game's own answer too
    assert obs[0]["content"].startswith("I beg your pardon?")
    env.close()


def test_a_game_that_dies_is_an_infrastructure_error_not_a_zero(coin):
    env = make_env()
    env.reset(options={"task": coin})
    os.kill(env.unwrapped._game._pid, signal.SIGKILL)
    _obs, reward, terminated, truncated, info = env.step("go west")
    assert truncated and not terminated and reward == 0.0
    assert "GameCrashed" in info["sandbox_error"]
    assert info["sandbox_fault"] == "infra" and info["truncated_by"] == "sandbox_infra"
    env.close()


def test_a_game_that_does_not_load_is_an_infrastructure_error(tmp_path, coin):
    broken = tmp_path / "broken.z8"
    broken.write_bytes(b"not a z-machine story file" * 100)
    broken.with_suffix(".json").write_text(Path(ensure_game(coin)).with_suffix(".json").read_text())
    env = make_env()
    for task in (
        TextWorldTask(id="broken", game_file=str(broken)),
        TextWorldTask(id="missing", game_file=str(tmp_path / "missing.z8")),
    ):
        with pytest.raises(GameCrashed):
            env.reset(options={"task": task})
    env.close()


def test_episodes_run_concurrently_in_processes_of_their_own(coin, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the game's `script`/`save` commands must not write here

    async def play(env, commands):
        await env.areset(options={"task": coin})
        game = env.unwrapped._game
        outs = [await env.astep(c) for c in commands]
        return game, outs

    async def main():
        a, b = make_env(), make_env()
        (ga, outs_a), (gb, outs_b) = await asyncio.gather(
            play(a, ["save", "script", *walkthrough(coin)]), play(b, ["restore", "look"])
        )
        assert ga._pid != gb._pid
        assert sum(o[1] for o in outs_a) == pytest.approx(1.0) and outs_a[-1][2]  # won
        assert sum(o[1] for o in outs_b) == 0.0 and not outs_b[-1][2]
        assert not os.path.exists(ga._workdir)  # a won game's episode is over: its folder is gone
        await b.aclose()
        assert not os.path.exists(gb._workdir)
        for _ in range(100):  # SIGKILL is delivered asynchronously
            if not (running(ga._pid) or running(gb._pid)):
                break
            await asyncio.sleep(0.05)
        assert not running(ga._pid) and not running(gb._pid)

    asyncio.run(main())
    assert list(tmp_path.iterdir()) == []


def test_parse_command():
    assert parse_command("I should go.\n<action> go   north </action>") == "go north"
    assert parse_command("<action>look</action> no, <action>take key</action>") == "take key"
    assert parse_command("thinking...\n\ntake coin\n") == "take coin"
    assert parse_command("") == ""


def test_a_hung_game_dies_with_a_killed_harness_and_prints_nothing(coin, tmp_path):
    """A harness killed outright never closes its episodes. A game whose interpreter hangs
    (here on dumb-frotz's own `\\help`, sent past the env's parse_command, which no longer lets
    it through) must not outlive it, nor fill the harness's stderr (one such game filled the disk)."""
    harness = tmp_path / "harness.py"
    harness.write_text(
        textwrap.dedent(f"""
            import asyncio
            from arborl.envs.textworld.process import GameProcess

            async def main():
                game = GameProcess({str(ensure_game(coin))!r}, ("feedback",), timeout_s=600)
                await game.start()
                print(game._pid, flush=True)
                await game.step("\\\\help")

            asyncio.run(main())
        """)
    )
    with (tmp_path / "stderr").open("wb") as err:
        proc = subprocess.Popen([sys.executable, str(harness)], stdout=subprocess.PIPE, stderr=err)
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())
        time.sleep(2)
        assert running(pid)
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(pid)
    assert (tmp_path / "stderr").stat().st_size < 10_000


def test_many_episodes_start_at_once(coin):
    async def main():
        envs = [make_env() for _ in range(16)]
        results = await asyncio.gather(
            *(e.areset(options={"task": coin}) for e in envs), return_exceptions=True
        )
        for e in envs:
            await e.aclose()
        return results

    results = asyncio.run(main())
    assert not [r for r in results if isinstance(r, BaseException)]


def test_no_reply_can_crash_the_game(coin):
    """The agent's text reaches a C interpreter: NUL and other control characters, very long
    lines, non-ASCII text, lone surrogates and the interpreter's own escapes (a line that starts
    with a backslash is a dumb-frotz command: it then waits for input the game never gets) are
    the game's business, never a dead game (which would count as the infrastructure's failure,
    not the agent's: an agent could abstain from any episode it was losing)."""
    env = make_env(step_timeout_s=10)
    env.reset(options={"task": coin})
    for reply in (
        "\\help",
        "<action>\\q</action>",
        "\\",
        "go \\t north",
        "go\x00 west",
        "take\x01\x1b[2J coin",
        "x" * 5000,
        "ünïcode \U0001f600",
        "x" * 197 + "é" * 20,  # the interpreter cuts a command at 198 bytes: here inside an é
        "open " + "\U0001f600" * 60,
        "\ud800 look",
        "<action></action>",
    ):
        *_, truncated, info = env.step(reply)
        assert not truncated and "sandbox_error" not in info, (reply[:20], info)
        assert "\x00" not in info["command"] and len(info["command"]) <= 256
    assert parse_command("go\x00 west") == "go west"
    assert parse_command("<action>\\help</action>") == "help"
    assert parse_command("take the café's key \U0001f511") == "take the caf 's key"
    env.close()
