"""Prime Intellect `verifiers` environments played as arborl envs, without verifiers' trainer
(envs/prime_verifiers.py): three small verifiers environments written here
(prime_verifiers_examples/: `vf.SingleTurnEnv`, a `vf.MultiTurnEnv` game, a `vf.ToolEnv`), each
an env id and a suite of its dataset rows scored by its rubric. Checked in fresh processes with
verifiers' folder (scripts/setup.sh: .venv/verifiers-site, installed --no-deps) on PYTHONPATH, so
the shared venv never imports it: Gymnasium's `check_env`, an episode step by step, verifiers' own
limits and arborl's budget, `arborl eval` gold 100 % / empty 0 % through the real CLI, what is
refused (group rubrics), and the error without verifiers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from arborl_require import unavailable

ROOT = Path(__file__).parents[2]
EXAMPLES = Path(__file__).parent / "prime_verifiers_examples"
CMD = [sys.executable, "-m", "arborl.cli.main"]


@pytest.fixture(scope="module")
def vf_site() -> Path:
    site = Path(os.environ.get("ARBORL_VERIFIERS_SITE", ROOT / ".venv" / "verifiers-site"))
    if not (site / "verifiers").is_dir():
        unavailable(
            "verifiers",
            f"no verifiers in {site}: bash scripts/setup.sh (pip install --no-deps --target {site} "
            "-r scripts/verifiers.txt)",
        )
    return site


def run(args: list[str], *path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`args` with `path` on PYTHONPATH, in `cwd`: never the repository's root, whose `agents/`
    folder would shadow openai-agents' `agents` (what verifiers' ToolEnv imports)."""
    pythonpath = os.pathsep.join([*map(str, path), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {**os.environ, "PYTHONPATH": pythonpath, "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
    return subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def python(script: str, *path: Path, cwd: Path) -> Any:
    """Run `script` in a fresh interpreter; it prints one JSON value last."""
    res = run([sys.executable, "-c", textwrap.dedent(script)], *path, cwd=cwd)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads(res.stdout.splitlines()[-1])


def test_each_kind_passes_check_env_and_plays_its_gold_episode(vf_site, tmp_path):
    script = """
    import json, warnings

    import gymnasium
    from gymnasium.utils.env_checker import check_env

    import arborl.envs, arborl_vf_suites
    from arborl.tasks import get_suite

    out = []
    for name in ("vf_capitals", "vf_guess", "vf_add"):
        suite = get_suite(name)
        env = gymnasium.make(suite.env_id)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=r".*(WARN|ERROR): ")  # a Gymnasium warning fails
            check_env(env.unwrapped)
        task = suite.tasks()[1]
        obs, info = env.reset(options={"task": task})
        seen, policy, steps = list(obs), suite.gold_policy(task), []
        while True:
            reply = policy(seen, info)
            obs, reward, terminated, truncated, info = env.step(reply)
            seen += [{"role": "assistant", "content": reply}, *obs]
            steps.append([reply, [dict(m) for m in obs], reward, terminated, truncated])
            if terminated or truncated:
                break
        out.append({"suite": name, "tasks": [t.id for t in suite.tasks()], "first": [dict(m) for m in seen[:2]],
                    "steps": steps, "verifiers": info["verifiers"]})
        env.close()
    print(json.dumps(out))
    """
    capitals, guess, add = python(script, vf_site, EXAMPLES, cwd=tmp_path)
    # single-turn: the system prompt and question in, one reply, the rubric's reward, terminated
    assert capitals["tasks"] == ["vf_capitals/0", "vf_capitals/1", "vf_capitals/2"]
    assert capitals["first"] == [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is the capital of Japan? Reply with the name only."},
    ]
    assert [s[0] for s in capitals["steps"]] == ["Tokyo"] and capitals["steps"][-1][2:] == [1.0, True, False]
    assert capitals["verifiers"]["metrics"]["exact_answer"] == 1.0
    # multi-turn: env_response's feedback is each step's observation; the reward comes at the end
    assert [s[0] for s in guess["steps"]] == ["50", "25", "37"]
    assert [s[1][0]["content"] for s in guess["steps"][:-1]] == ["Lower.", "Higher."]
    assert [s[2] for s in guess["steps"]] == [0.0, 0.0, 1.0] and guess["steps"][-1][3] is True
    assert guess["verifiers"]["stop_condition"] == "guessed"
    # tools: the hermes call reaches ToolEnv's `add`, its result is a tool message
    assert add["steps"][0][1] == [{"role": "tool", "content": "42"}]
    assert add["steps"][-1][2:] == [1.0, True, False]
    assert add["verifiers"]["metrics"]["add_calls"] == 1.0


def test_verifiers_own_limit_truncates_and_arborls_budget_is_scored_by_the_rubric(vf_site, tmp_path):
    script = """
    import json

    import gymnasium
    import arborl_vf_suites  # verifiers/vf_guess-v0 as it is
    from arborl.envs.prime_verifiers import register_verifiers_environment
    from arborl.envs.wrappers import TurnLimit

    suite = register_verifiers_environment("vf_guess", env_args={"max_turns": 2}, env_id="verifiers/vf_guess_short-v0",
                                           suite="vf_guess_short")
    task = suite.tasks()[0]  # the secret is 1
    env = gymnasium.make(suite.env_id)
    env.reset(options={"task": task})
    own = [env.step("50")[1:], env.step("40")[1:]]  # verifiers' max_turns=2 ends it
    cut = TurnLimit(gymnasium.make("verifiers/vf_guess-v0"), max_turns=1)
    cut.reset(options={"task": task})
    right = cut.step("1")[1:]
    cut.reset(options={"task": task})
    wrong = cut.step("60")[1:]
    print(json.dumps({"own": own, "right": right, "wrong": wrong}))
    """
    out = python(script, vf_site, EXAMPLES, cwd=tmp_path)
    (r1, term1, trunc1, _), (r2, term2, trunc2, info2) = out["own"]
    assert (r1, term1, trunc1) == (0.0, False, False)
    assert (r2, term2, trunc2) == (0.0, False, True) and info2["verifiers"][
        "stop_condition"
    ] == "max_turns_reached"
    # under a one-turn budget, the right guess still ends the game on the env's own terms
    assert out["right"][:3] == [1.0, True, False]
    # a budget that ends a running rollout: verifiers' rubric scores what it has (a wrong guess)
    reward, terminated, truncated, info = out["wrong"]
    assert (reward, terminated, truncated, info["truncated_by"]) == (0.0, False, True, "turn_limit")
    assert info["verifiers"]["metrics"]["solved"] == 0.0


@pytest.mark.parametrize("suite", ["vf_guess", "vf_add"])
def test_arborl_eval_gold_100_empty_0(vf_site, suite, tmp_path):
    for agent, rate in (("gold", 1.0), ("empty", 0.0)):
        run_dir = tmp_path / agent
        res = run([*CMD, "eval", "--import", "arborl_vf_suites", f"suite={suite}", f"agent={agent}",
                   f"run.dir={run_dir}"], vf_site, EXAMPLES, cwd=tmp_path)  # fmt: skip
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["resolved_rate"] == rate and summary["errors"] == 0, summary


def test_a_group_rubric_is_refused_with_the_reason(vf_site, tmp_path):
    (tmp_path / "vf_pairs.py").write_text(
        textwrap.dedent(
            """
            import verifiers as vf
            from datasets import Dataset

            def load_environment():
                def best_of_group(completions, answers) -> list[float]:
                    return [1.0 for _ in completions]

                rows = Dataset.from_list([{"question": "Say hi.", "answer": "hi"}])
                return vf.SingleTurnEnv(eval_dataset=rows, rubric=vf.Rubric(funcs=[best_of_group]))
            """
        )
    )
    script = """
    import json
    from arborl.envs.prime_verifiers import register_verifiers_environment

    suite = register_verifiers_environment("vf_pairs")  # registering imports nothing yet
    try:
        suite.tasks()
    except ValueError as e:
        print(json.dumps(str(e)))
    """
    assert "group reward functions" in python(script, vf_site, tmp_path, cwd=tmp_path)


def test_without_verifiers_the_error_says_how_to_install_it(tmp_path):
    script = """
    import json
    import gymnasium
    from arborl.envs.prime_verifiers import register_verifiers_environment

    register_verifiers_environment("vf_capitals")
    try:
        gymnasium.make("verifiers/vf_capitals-v0")
    except ImportError as e:
        print(json.dumps(str(e)))
    """
    assert "pip install --no-deps -r scripts/verifiers.txt" in python(script, EXAMPLES, cwd=tmp_path)
