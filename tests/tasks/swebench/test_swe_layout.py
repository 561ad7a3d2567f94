"""Repository layouts (src/, pyproject.toml / setup.cfg / setup.py package dirs) put on the test
commands' path, as SWE-bench's `pip install -e .` makes them importable; and the hint a gold
patch that does not resolve gets, read from real runner output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from arborl.tasks.swebench import (
    SWEEnvironment,
    SWEInstance,
    environment_hint,
    package_dirs,
    swe_parts,
    to_code_task,
    with_layout,
)
from arborl.tasks.swebench import real as swe_real
from arborl.tasks.swebench.harness import END_TEST_OUTPUT, START_TEST_OUTPUT
from arborl.tasks.swebench.repos import find_repository

PKG = {"pkg/__init__.py": b"X = 1\n"}


@pytest.mark.parametrize(
    ("files", "dirs"),
    [
        ({"src/pkg/__init__.py": b""}, ("src",)),  # flit, or no build configuration at all
        ({"src/mod.py": b""}, ("src",)),
        ({"src/__init__.py": b"", "src/a.py": b""}, ()),  # src is itself a package
        ({**PKG, "setup.py": b"setup(packages=find_packages(exclude=['tests']))"}, ()),  # flat
        (
            {
                "lib/pkg/__init__.py": b"",
                "pyproject.toml": b'[tool.setuptools]\npackage-dir = {"" = "lib"}\n',
            },
            ("lib",),
        ),
        (
            {
                "python/pkg/__init__.py": b"",
                "pyproject.toml": b'[tool.setuptools.packages.find]\nwhere = ["python"]\n',
            },
            ("python",),
        ),
        (
            {
                "src/pkg/__init__.py": b"",
                "pyproject.toml": b'[tool.hatch.build.targets.wheel]\npackages = ["src/pkg"]\n',
            },
            ("src",),
        ),
        (
            {
                "code/pkg/__init__.py": b"",
                "pyproject.toml": b'[tool.poetry]\npackages = [{include = "pkg", from = "code"}]\n',
            },
            ("code",),
        ),
        (
            {"source/pkg/__init__.py": b"", "setup.cfg": b"[options]\npackage_dir =\n    =source\n"},
            ("source",),
        ),
        (
            {"source/pkg/__init__.py": b"", "setup.cfg": b"[options.packages.find]\nwhere = source\n"},
            ("source",),
        ),
        ({"lib/pkg/__init__.py": b"", "setup.py": b"setup(package_dir={'': 'lib'})"}, ("lib",)),
        ({"lib/pkg/__init__.py": b"", "setup.py": b'find_packages(where="lib")'}, ("lib",)),
        (
            {**PKG, "pyproject.toml": b"[tool.setuptools.packages.find]\nwhere = ['gone']\n"},
            (),
        ),  # no such dir
        ({**PKG, "pyproject.toml": b"not [toml"}, ()),
    ],
)
def test_package_dirs_from_the_layout(files, dirs):
    assert package_dirs(files) == dirs


@pytest.mark.parametrize(
    ("repo", "dirs"), [("tkem/cachetools", ("src",)), ("more-itertools/more-itertools", ())]
)
def test_package_dirs_of_real_repositories(repo, dirs):
    """cachetools: `[tool.setuptools] package-dir = {"" = "src"}`; more-itertools: flit, flat."""
    inst = next(i for i in swe_real.instances() if i.repo == repo)
    files = find_repository(repo, [swe_real.REPOS]).files_at(inst.base_commit)
    assert package_dirs(files) == dirs


def test_the_path_reaches_both_test_commands_and_survives_a_chdir(tmp_path):
    env = SWEEnvironment(test_cmd="python3 -c 'import os; os.chdir(\"/\"); import pkg; print(pkg.X)'")
    files = {"src/pkg/__init__.py": b"X = 'from src'\n"}
    laid_out = with_layout(env, files)
    assert laid_out.python_path == ("src",) and "PYTHONPATH=$PWD/src" in laid_out.run_tests_cmd
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "__init__.py").write_text("X = 'from src'\n")
    r = subprocess.run(["bash", "-c", laid_out.eval_test_cmd], cwd=tmp_path, capture_output=True, text=True)
    assert r.stdout.strip() == "from src", r.stderr
    bare = subprocess.run(["bash", "-c", env.eval_test_cmd], cwd=tmp_path, capture_output=True, text=True)
    assert "No module named 'pkg'" in bare.stderr
    explicit = env.model_copy(update={"python_path": ()})
    assert with_layout(explicit, files) is explicit and explicit.eval_test_cmd == env.test_cmd
    for bad in ("/abs", "../up", "a:b"):
        with pytest.raises(ValueError, match="directories of the repository"):
            SWEEnvironment(python_path=(bad,))


def instance(**kw) -> SWEInstance:
    return SWEInstance.model_validate(
        {
            "instance_id": "me__tool-1",
            "repo": "me/tool",
            "base_commit": "0" * 40,
            "problem_statement": "p",
            "test_patch": "diff --git a/tests/test_tool.py b/tests/test_tool.py\n",
            "FAIL_TO_PASS": ["tests/test_tool.py::test_fixed"],
            "PASS_TO_PASS": ["tests/test_tool.py::test_ok"],
            **kw,
        }
    )


def test_a_code_task_from_a_src_layout_runs_with_its_package_dir():
    task = to_code_task(instance(), repo_files={"src/tool/__init__.py": b"", "tests/test_tool.py": b""})
    _, env = swe_parts(task)
    assert env.python_path == ("src",) and task.test_command.startswith("PYTHONPATH=$PWD/src")
    spec = json.loads(task.verifier_files["spec.json"])
    assert spec["test_cmd"] == env.eval_test_cmd and "PYTHONPATH=$PWD/src" in spec["test_cmd"]


@pytest.fixture
def src_repo(tmp_path) -> Path:
    """A src-layout repository (not installed) with a test file, as pytest meets it."""
    (tmp_path / "src" / "tool").mkdir(parents=True)
    (tmp_path / "src" / "tool" / "__init__.py").write_text("def f():\n    return 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_tool.py").write_text(
        "from tool import f\n\ndef test_fixed():\n    assert f() == 1\n\ndef test_ok():\n    assert True\n"
    )
    (tmp_path / "tests" / "test_case.py").write_text(
        "import unittest\nfrom tool import f\n\nclass T(unittest.TestCase):\n"
        "    def test_fixed(self):\n        self.assertEqual(f(), 1)\n"
    )
    return tmp_path


def harness_log(cmd: str, cwd: Path) -> str:
    """What the harness prints around a real test run."""
    r = subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True)
    return f"{START_TEST_OUTPUT}\n{r.stdout}{r.stderr}\n{END_TEST_OUTPUT}\n"


PYTEST = f"{sys.executable} -m pytest -rA -p no:cacheprovider tests/test_tool.py"


def test_hints_name_the_cause_and_the_key_to_set(src_repo):
    inst, env = instance(), SWEEnvironment()
    log = harness_log(PYTEST, src_repo)  # the package under src/ is not on the path
    hint = environment_hint(log, None, inst, env)
    assert "cannot import 'tool'" in hint and "`python_path`" in hint and "swe.environments" in hint
    assert "`pip`" in hint  # or a dependency the image lacks
    ran = harness_log(f"PYTHONPATH=src {PYTEST}", src_repo)
    assert environment_hint(ran, None, inst, env) is None  # tests ran: nothing to blame
    bad_flag = harness_log(f"{PYTEST} --no-such-flag", src_repo)
    assert "`test_cmd`" in environment_hint(bad_flag, None, inst, env)
    other_runner = harness_log(
        f"PYTHONPATH=src {sys.executable} -m unittest discover -v -s tests -p test_case.py", src_repo
    )
    assert "`log_parser`" in environment_hint(other_runner, None, inst, env)
    nothing = harness_log(f"{sys.executable} -m pytest -rA -p no:cacheprovider -k nomatch src", src_repo)
    assert "`test_cmd`" in environment_hint(nothing, None, inst, env)
    assert "`test_timeout_s`" in environment_hint("", "tests_timed_out", inst, env)
    assert "`patch`" in environment_hint("", "patch_apply_failed", inst, env)
