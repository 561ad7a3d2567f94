"""`arborl eval` on a user's own files: SWE-bench instances (`suite=PATH`), a predictions file
(`predictions=FILE`, SWE-bench's format), a gold patch that does not resolve (an environment
error, not NO), `--import` of a module registering a suite; and the docs' worked example."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from gitrepo import commit, git

from arborl.eval.config import EvalConfig
from arborl.tasks.swebench.mini import INSTANCES, REPOS
from arborl.tasks.swebench.predictions import PredictionsError, load_predictions

CMD = [sys.executable, "-m", "arborl.cli.main"]
DOCS = Path(__file__).parents[2] / "docs" / "eval.md"


def arborl(*args: str, cwd: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def rows(n: int) -> list[dict]:
    return [json.loads(line) for line in INSTANCES.read_text().splitlines()[:n]]


def test_predictions_files_in_swe_bench_formats(tmp_path):
    preds = [
        {"instance_id": "a", "model_patch": "diff", "model_name_or_path": "m"},
        {"instance_id": "b", "model_patch": None},
    ]
    (tmp_path / "p.jsonl").write_text("\n".join(map(json.dumps, preds)) + "\n")
    (tmp_path / "p.json").write_text(json.dumps(preds))
    (tmp_path / "d.json").write_text(json.dumps({p["instance_id"]: p for p in preds}))
    for name in ("p.jsonl", "p.json", "d.json"):
        got = load_predictions(tmp_path / name)
        assert set(got) == {"a", "b"} and got["a"]["model_patch"] == "diff"
    (tmp_path / "bad.jsonl").write_text('{"instance_id": "a"}\n{"model_patch": "x"}\n')
    with pytest.raises(PredictionsError, match=r"bad.jsonl:2: .*instance_id"):
        load_predictions(tmp_path / "bad.jsonl")
    (tmp_path / "dup.json").write_text(json.dumps([preds[0], preds[0]]))
    with pytest.raises(PredictionsError, match="a second prediction"):
        load_predictions(tmp_path / "dup.json")


def test_config_for_paths_and_predictions():
    cfg = EvalConfig(suite="data/my-instances.jsonl", predictions="preds.jsonl")
    assert cfg.agent == "predictions" and cfg.run_dir() == Path("runs/eval/my-instances-predictions")
    with pytest.raises(ValueError, match="needs predictions=FILE"):
        EvalConfig(agent="predictions")


@pytest.mark.docker
def test_a_user_file_gold_empty_and_predictions(docker_backend, tmp_path):
    inst = rows(3)
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in inst))
    # swe.images=off: the portable form (files read from the bundle by the loader, binary-safe)
    common = [
        "suite=mine.jsonl",
        f"swe.repos_dir=[{REPOS}]",
        "swe.images=off",
        "sandbox=docker",
        "concurrency=2",
    ]
    gold = arborl("eval", *common, "agent=gold", "run.dir=gold", cwd=tmp_path)
    assert gold.returncode == 0, gold.stdout + gold.stderr
    assert json.loads((tmp_path / "gold/summary.json").read_text())["resolved"] == 3
    # predictions: one gold patch, one empty, one that does not apply, one instance without
    preds = [
        {"instance_id": inst[0]["instance_id"], "model_patch": inst[0]["patch"], "model_name_or_path": "me"},
        {"instance_id": inst[1]["instance_id"], "model_patch": ""},
        {"instance_id": inst[2]["instance_id"], "model_patch": inst[0]["patch"].replace("-", "+")},
    ]
    (tmp_path / "preds.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds[:3]))
    res = arborl("eval", *common, "predictions=preds.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    run = tmp_path / "runs/eval/mine-predictions"
    s = json.loads((run / "summary.json").read_text())
    assert s["samples"] == 3 and s["resolved"] == 1 and s["grades"] == {"FULL": 1, "NO": 2}
    grades = {
        p["instance_id"]: json.loads(
            (run / "instances" / p["instance_id"] / "sample-0/grade.json").read_text()
        )
        for p in preds
    }
    assert grades[inst[1]["instance_id"]]["error"] == "empty_patch"
    assert grades[inst[2]["instance_id"]]["error"] == "patch_apply_failed"
    (tmp_path / "stray.jsonl").write_text(
        json.dumps({"instance_id": "nobody__x-1", "model_patch": ""}) + "\n"
    )
    res = arborl("eval", *common, "predictions=stray.jsonl", "run.dir=stray", cwd=tmp_path)
    assert res.returncode == 2 and "does not have" in res.stdout


@pytest.mark.docker
def test_a_gold_patch_that_does_not_resolve_is_an_environment_error(docker_backend, tmp_path):
    """An environment whose test command cannot run the tests (as a src-layout repository
    without its package installed): the gold run says the environment is broken."""
    inst = rows(1)[0]
    (tmp_path / "one.jsonl").write_text(json.dumps(inst) + "\n")
    (tmp_path / "envs.json").write_text(
        json.dumps([{"repo": inst["repo"], "test_cmd": "python3 -m pytest -rA --no-such-flag"}])
    )
    res = arborl(
        "eval",
        "suite=one.jsonl",
        f"swe.repos_dir=[{REPOS}]",
        "swe.environments=envs.json",
        "sandbox=docker",
        "agent=gold",
        "run.dir=run",
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    s = json.loads((tmp_path / "run/summary.json").read_text())
    assert s["env_errors"] == 1 and s["samples"] == 1 and s["resolved_rate"] == 0.0 and s["grades"] == {}
    why = (tmp_path / "run/instances" / inst["instance_id"] / "sample-0/error.txt").read_text()
    assert "gold patch does not resolve" in why
    assert "likely cause: the test command did not run" in why and "`test_cmd`" in why


def fix_instance(repo: Path, name: str, base: str, fix: str, f2p: list[str], p2p: list[str]) -> dict:
    """A SWE-bench instance from a fix commit: the code diff is the patch, the test diff the test patch."""
    return {
        "instance_id": f"me__tool-{name}",
        "repo": "me/tool",
        "base_commit": base,
        "problem_statement": git(repo, "log", "-1", "--format=%B", fix),
        "patch": git(repo, "diff", base, fix, "--", "src"),
        "test_patch": git(repo, "diff", base, fix, "--", "tests"),
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
    }


@pytest.fixture
def src_layout_repo(tmp_path) -> tuple[Path, list[dict]]:
    """A src-layout repository (cachetools' pyproject: `package-dir = {"" = "src"}`) at
    `<owner>/<name>` under repos/, and two fixes: one whose tests need only the package, one whose
    new test needs a dependency no environment provides."""
    repo = tmp_path / "repos" / "me" / "tool"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    base = commit(
        repo,
        {
            "pyproject.toml": '[project]\nname = "tool"\nversion = "1.0"\n\n'
            '[tool.setuptools]\npackage-dir = {"" = "src"}\n',
            "src/tool/__init__.py": "def clamp(x, lo, hi):\n    return max(lo, min(x, lo))\n",
            "tests/test_tool.py": "from tool import clamp\n\n\ndef test_low():\n    assert clamp(-5, 0, 9) == 0\n",
        },
        "tool 1.0",
    )
    fix = commit(
        repo,
        {
            "src/tool/__init__.py": "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
            "tests/test_tool.py": "from tool import clamp\n\n\ndef test_low():\n    assert clamp(-5, 0, 9) == 0\n"
            "\n\ndef test_high():\n    assert clamp(50, 0, 9) == 9\n",
        },
        "clamp: values above hi are clamped to hi",
    )
    fix2 = commit(
        repo,
        {
            "src/tool/__init__.py": "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n\n\nSPAN = 9\n",
            "tests/test_span.py": "import nodep_for_arborl\nfrom tool import SPAN\n\n\ndef test_span():\n"
            "    assert SPAN == 9\n",
        },
        "add SPAN (its test needs a dependency)",
    )
    t = "tests/test_tool.py::"
    return repo, [
        fix_instance(repo, "1", base, fix, [t + "test_high"], [t + "test_low"]),
        fix_instance(repo, "2", fix, fix2, ["tests/test_span.py::test_span"], []),
    ]


@pytest.mark.docker
def test_a_src_layout_repository_resolves_without_an_environment(docker_backend, tmp_path, src_layout_repo):
    """No swe.environments: the package dir comes from pyproject.toml, as SWE-bench's install
    makes it importable. The instance that needs a missing dependency is an environment error
    that names the module and the keys to set."""
    _, rows = src_layout_repo
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for images in ("off", "auto"):
        res = arborl(
            "eval",
            "suite=mine.jsonl",
            f"swe.repos_dir=[{tmp_path / 'repos'}]",
            f"swe.images={images}",
            "sandbox=docker",
            "agent=gold",
            f"run.dir=run-{images}",
            cwd=tmp_path,
        )
        assert res.returncode == 0, res.stdout + res.stderr
        s = json.loads((tmp_path / f"run-{images}/summary.json").read_text())
        assert s["resolved"] == 1 and s["samples"] == 2 and s["env_errors"] == 1, (images, s)
        why = (tmp_path / f"run-{images}/instances/me__tool-2/sample-0/error.txt").read_text()
        assert "cannot import 'nodep_for_arborl'" in why and "`pip`" in why, why
        assert "`python_path`" in why and "swe.environments" in why


def test_import_registers_a_users_suite(tmp_path):
    (tmp_path / "my_suites.py").write_text(
        "from arborl.tasks import Suite, register_suite\n"
        "register_suite(Suite('my-tools', 'arborl/Tool-v0', 'arborl.tasks.toy.tool_mini:load_suite',\n"
        "    gold='arborl.tasks.toy.tool_mini:gold_policy', empty='arborl.tasks.toy.tool_mini:empty_policy'))\n"
    )
    res = arborl("eval", "--import", str(tmp_path / "my_suites.py"), "--list", cwd=tmp_path)
    assert res.returncode == 0 and "my-tools" in res.stdout, res.stdout + res.stderr
    res = arborl(
        "eval",
        "--import",
        str(tmp_path / "my_suites.py"),
        "suite=my-tools",
        "limit=3",
        "run.dir=r",
        "report=false",
        cwd=tmp_path,
    )
    assert res.returncode == 0 and "resolved 3/3" in res.stdout, res.stdout + res.stderr
    res = arborl("eval", "--import", "no_such_module_here", "--list", cwd=tmp_path)
    assert res.returncode == 2 and "--import failed" in res.stdout


def doc_block(marker: str, lang: str) -> str:
    """The fenced block right after `<!-- marker ... -->` in docs/eval.md."""
    text = DOCS.read_text()
    m = re.search(rf"<!-- {marker}[^>]*-->\n```{lang}\n(.*?)\n```", text, re.S)
    assert m, f"docs/eval.md has no {marker} block"
    return m.group(1)


def test_the_docs_environments_file_loads(tmp_path):
    from arborl.tasks.swebench import SWEInstance, environment_for, load_environments, with_layout

    (tmp_path / "envs.json").write_text(doc_block("environments-example", "json"))
    envs = load_environments(tmp_path / "envs.json")
    inst = rows(1)[0] | {"repo": "tkem/cachetools"}
    env = environment_for(SWEInstance.model_validate(inst), envs)
    assert env.python_path == ("src",) and with_layout(env, {}) is env  # set: not read from the layout
    assert env.eval_test_cmd.startswith("PYTHONPATH=$PWD/src") and "-o addopts=" in env.eval_test_cmd
    assert [e.log_parser for e in envs] == ["pytest", "pytest", "unittest"] and envs[1].pip


def test_the_docs_python_example_runs_as_written(tmp_path):
    r = subprocess.run(
        [sys.executable, "-c", doc_block("python-example", "python")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode == 0 and "files" in r.stdout, r.stdout + r.stderr


@pytest.mark.docker
def test_the_docs_worked_example_runs_as_written(docker_backend, tmp_path):
    bin_dir = str(Path(sys.executable).parent)  # `arborl` and `python` of this environment
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", doc_block("worked-example", "bash")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "resolved 2/2 (100.0%)" in r.stdout and "resolved 0/2 (0.0%)" in r.stdout
    assert (
        json.loads((tmp_path / "runs/eval/my-instances-predictions/summary.json").read_text())["resolved"]
        == 1
    )


@pytest.mark.docker
@pytest.mark.gui
def test_osworld_jsons_as_a_suite_and_a_broken_setup_is_an_environment_error(gui_backend, tmp_path):
    data = Path(__file__).parents[1] / "envs/desktop/data/osworld-os"
    folder = tmp_path / "os"
    folder.mkdir()
    for tid in ("bedcedc4-4d72-425e-ad62-21960b11fe0d", "b3d4a89c-53f2-4d6b-8b6a-541fb5d205fa"):
        (folder / f"{tid}.json").write_text((data / f"{tid}.json").read_text())  # as OSWorld ships them
    broken = json.loads((data / "bedcedc4-4d72-425e-ad62-21960b11fe0d.json").read_text())
    broken["id"] = "needs-a-missing-program"
    broken["config"].insert(
        0, {"type": "execute", "parameters": {"command": "gnome-control-center", "shell": True}}
    )
    (folder / "broken.json").write_text(json.dumps(broken))
    res = arborl(
        "eval", "suite=os", "agent=empty", "sandbox=docker", "concurrency=1", "run.dir=run", cwd=tmp_path
    )
    assert res.returncode == 0, res.stdout + res.stderr
    s = json.loads((tmp_path / "run/summary.json").read_text())
    assert s["samples"] == 3 and s["resolved"] == 0 and s["env_errors"] == 1, s  # errors count
    why = (tmp_path / "run/instances/needs-a-missing-program/sample-0/error.txt").read_text()
    assert "could not run (exit 127)" in why


@pytest.mark.docker
def test_a_user_file_on_instance_images_from_a_bare_mirror(docker_backend, tmp_path):
    inst = rows(1)[0]
    slug = inst["repo"].replace("/", "__")
    mirrors = tmp_path / "mirrors"
    subprocess.run(
        ["git", "clone", "-q", "--mirror", str(REPOS / f"{slug}.bundle"), str(mirrors / f"{slug}.git")],
        check=True,
    )
    (tmp_path / "one.jsonl").write_text(json.dumps(inst) + "\n")
    res = arborl(
        "eval",
        "suite=one.jsonl",
        f"swe.repos_dir=[{mirrors}]",
        "swe.images=auto",
        "sandbox=docker",
        "agent=gold",
        "run.dir=run",
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads((tmp_path / "run/summary.json").read_text())["resolved"] == 1
