"""`arborl/Code-v0` in real sandboxes: scripted episodes, the editor, the verifier, the hash."""

from __future__ import annotations

import pytest

from arborl.envs import TurnLimit
from arborl.envs.parsers import get_parser
from arborl.tasks import CodeTask

pytestmark = pytest.mark.docker
P = get_parser("hermes")

TASK = CodeTask(
    id="strings-1",
    problem_statement="`shout('hi')` must return 'HI!'.",
    repo_files={
        "pkg/__init__.py": "",
        "pkg/text.py": "def shout(s):\n    return s.upper()\n\n\ndef whisper(s):\n    return s.lower()\n",
        "tests/test_text.py": "from pkg.text import shout\n\n\ndef test_shout():\n    assert shout('a') == 'A!'\n",
    },
    hidden_files={
        "tests/test_hidden.py": "from pkg.text import shout\n\n\ndef test_x():\n    assert shout('hi') == 'HI!'\n"
    },
)


def call(name: str, **args) -> str:
    return P.format_call(name, args)


def edit(**args) -> str:
    return call("str_replace_editor", **args)


def test_scripted_episode_solves_the_task(make_env):
    env = make_env("arborl/Code-v0")
    obs, info = env.reset(options={"task": TASK})
    assert obs[0]["role"] == "system" and "HI!" in obs[1]["content"]
    assert [t["function"]["name"] for t in info["tools"]] == [
        "bash",
        "str_replace_editor",
        "run_tests",
        "submit",
    ]
    start_hash = info["state_hash"]
    assert len(start_hash) == 16

    obs, reward, terminated, truncated, info = env.step(call("run_tests"))
    assert "1 failed" in obs[0]["content"] and "exit code: 1" in obs[0]["content"]
    assert info["state_hash"] == start_hash and info["tool_calls"][0]["ok"]

    obs, *_, info = env.step(
        edit(command="str_replace", path="pkg/text.py", old_str="s.upper()", new_str="s.upper() + '!'")
    )
    assert "Edited /workspace/pkg/text.py" in obs[0]["content"] and "s.upper() + '!'" in obs[0]["content"]
    assert info["state_hash"] != start_hash

    obs, *_ = env.step(call("bash", command="git diff --stat && whoami"))
    assert "pkg/text.py | 2 +-" in obs[0]["content"] and "agent" in obs[0]["content"]

    obs, reward, terminated, truncated, info = env.step(call("submit"))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["verifier"]["passed"] and "2 passed" in info["verifier"]["output_tail"]
    t = info["timing"]
    assert t["step_s"] >= t["sandbox_s"] > 0 and t["overhead_s"] >= 0


def test_the_same_tree_has_the_same_hash_across_episodes(make_env):
    a, b = make_env("arborl/Code-v0"), make_env("arborl/Code-v0")
    ha, _ = a.reset(options={"task": TASK})[1]["state_hash"], b.reset(options={"task": TASK})
    fix = edit(command="str_replace", path="pkg/text.py", old_str="return s.lower()", new_str="return s")
    # two different routes to the same files
    h1 = a.step(fix)[-1]["state_hash"]
    b.step(call("bash", command="sed -i 's/return s.lower()/return s/' pkg/text.py"))
    h2 = b.step(call("bash", command="touch -d 2001-01-01 pkg/text.py && ls"))[-1]["state_hash"]
    assert h1 == h2 != ha
    # a scratch file changes the state; caches do not
    assert (
        b.step(
            call(
                "bash",
                command="python3 -m pytest -q -p no:cacheprovider; mkdir -p x/__pycache__ && echo 1 > x/__pycache__/m.pyc",
            )
        )[-1]["state_hash"]
        == h1
    )
    assert b.step(call("bash", command="echo 1 > scratch.txt"))[-1]["state_hash"] != h1


def test_editor_errors_are_clear(make_env):
    env = make_env("arborl/Code-v0")
    env.reset(options={"task": TASK})

    def say(action: str) -> str:
        obs, _reward, terminated, truncated, _info = env.step(action)
        assert not terminated and not truncated
        return obs[0]["content"]

    assert "occurs 2 times" in say(edit(command="str_replace", path="pkg/text.py", old_str="return s."))
    assert "(at lines 2, 6)" in say(edit(command="str_replace", path="pkg/text.py", old_str="return s."))
    out = say(edit(command="str_replace", path="pkg/text.py", old_str="return  s.upper()"))
    assert "does not occur verbatim" in out
    out = say(edit(command="str_replace", path="pkg/text.py", old_str="  return s.upper()  \n\n\n\n"))
    assert "different leading/trailing whitespace" in out
    assert "does not exist" in say(edit(command="view", path="nope.py"))
    assert "already exists" in say(edit(command="create", path="pkg/text.py", file_text="x"))
    assert "Created /workspace/new/deep/f.py" in say(
        edit(command="create", path="new/deep/f.py", file_text="A\nB\n")
    )
    assert "     2\tB" in say(edit(command="view", path="new/deep/f.py", view_range=[2, -1]))
    assert "invalid view_range" in say(edit(command="view", path="new/deep/f.py", view_range=[5, 9]))
    assert "Inserted" in say(edit(command="insert", path="new/deep/f.py", insert_line=1, new_str="MID"))
    assert say(call("bash", command="cat new/deep/f.py")).rsplit("\n[exit", 1)[0] + "\n" == "A\nMID\nB\n"
    listing = say(edit(command="view", path="."))
    assert "/workspace/pkg/text.py" in listing and ".git" not in listing
    assert "does not take old_str" in say(edit(command="view", path="a.py", old_str="x"))
    assert "needs a non-empty `old_str`" in say(edit(command="str_replace", path="pkg/text.py"))
    say(call("bash", command="head -c 3000 /dev/urandom > blob.bin; printf 'caf\\xe9\\n' > latin.txt"))
    assert "binary file" in say(edit(command="view", path="blob.bin"))
    assert "not UTF-8 text" in say(edit(command="str_replace", path="latin.txt", old_str="caf", new_str="x"))
    # the editor acts as the agent user: it cannot touch what the agent cannot
    out = say(edit(command="create", path="/etc/evil", file_text="x"))
    assert "cannot write /etc/evil" in out and "Permission denied" in out
    out = say(edit(command="str_replace", path="/etc/passwd", old_str="root:x:0:0:", new_str="toor:x:0:0:"))
    assert "cannot write /etc/passwd" in out
    assert "not readable" in say(edit(command="view", path="/etc/shadow"))
    assert "is a directory" in say(edit(command="str_replace", path="pkg", old_str="a", new_str="b"))


def test_bash_timeouts_and_exit_codes(make_env):
    env = make_env("arborl/Code-v0", command_timeout_s=1)
    env.reset(options={"task": TASK})
    obs, _, _, _, info = env.step(call("bash", command="sleep 30"))
    assert "timed out after 1s" in obs[0]["content"]
    assert info["tool_calls"][0] == {**info["tool_calls"][0], "ok": False, "error": "timeout"}
    obs, *_ = env.step(call("bash", command="echo out; echo err >&2; exit 3"))
    assert obs[0]["content"] == "out\nerr\n[exit code: 3]"
    obs, *_ = env.step(call("bash", command="true"))
    assert obs[0]["content"] == "(no output)\n[exit code: 0]"


def test_budget_end_runs_the_verifier(make_env):
    env = TurnLimit(make_env("arborl/Code-v0"), max_turns=2)
    env.reset(options={"task": TASK})
    fix = edit(command="str_replace", path="pkg/text.py", old_str="s.upper()", new_str="s.upper() + '!'")
    assert env.step(fix)[1:4] == (0.0, False, False)
    _obs, reward, terminated, truncated, info = env.step(call("bash", command="ls"))
    assert (reward, terminated, truncated) == (1.0, False, True)
    assert info["truncated_by"] == "turn_limit" and info["verifier"]["passed"]


def test_a_failing_verifier_scores_zero_and_hidden_tests_stay_hidden(make_env):
    env = make_env("arborl/Code-v0")
    env.reset(options={"task": TASK})
    obs, *_ = env.step(call("bash", command="ls tests"))
    assert "test_hidden" not in obs[0]["content"]
    _, reward, terminated, _, info = env.step(call("submit"))
    assert reward == 0.0 and terminated and not info["verifier"]["passed"]


def test_repository_from_a_host_directory(make_env, tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("X = 1\n")
    (tmp_path / "logo.png").write_bytes(bytes(range(256)))
    task = CodeTask(
        id="host-repo",
        problem_statement="Set X to 2.",
        repo_path=str(tmp_path),
        verify_command="python3 -c 'import sys; sys.path.insert(0, \"src\"); import m; assert m.X == 2'",
    )
    env = make_env("arborl/Code-v0")
    env.reset(options={"task": task})
    obs, *_ = env.step(
        call("bash", command="sha256sum logo.png && git status --short && git log --oneline | wc -l")
    )
    import hashlib

    assert hashlib.sha256(bytes(range(256))).hexdigest() in obs[0]["content"]
    assert obs[0]["content"].endswith("1\n[exit code: 0]")  # committed, clean
    env.step(edit(command="str_replace", path="src/m.py", old_str="X = 1", new_str="X = 2"))
    assert env.step(call("submit"))[1] == 1.0


@pytest.mark.bwrap
def test_code_env_on_the_bwrap_backend(bwrap_backend, make_env):
    env = make_env("arborl/Code-v0", backend=bwrap_backend)
    env.reset(options={"task": TASK})
    env.step(edit(command="str_replace", path="pkg/text.py", old_str="s.upper()", new_str="s.upper() + '!'"))
    _obs, reward, terminated, _, _ = env.step(call("submit"))
    assert reward == 1.0 and terminated
