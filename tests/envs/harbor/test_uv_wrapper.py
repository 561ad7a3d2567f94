"""The wrapper the tests' uv runs behind (envs/harbor/uv_layer.py), run by bash here with the
real uv replaced by an echo: the Python versions it rewrites, and the projects of the agent's
it refuses wherever uv would look for them (the working directory, `--directory`, `--project`,
a parent). The episodes of test_harbor_forgery.py run it for real."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from arborl.envs.harbor.uv_layer import REAL, WRAPPER

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


@pytest.fixture
def uv(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "uv"
    exe.parent.mkdir()
    exe.write_text(WRAPPER.replace(f'exec {REAL}/"$(basename "$0")"', "echo RUN"))
    exe.chmod(0o755)
    agents = tmp_path / "app" / "sub"
    agents.mkdir(parents=True)
    (tmp_path / "app" / "pyproject.toml").write_text("[project]\nname = 'app'\n")
    os.chown(tmp_path / "app" / "pyproject.toml", 1000, 1000)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "pyproject.toml").write_text("[project]\nname = 'tests'\n")  # root's
    return exe


def run(uv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(uv), *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.parametrize(
    "args",
    [
        ("run", "pytest"),
        ("add", "pytest==8.4.1"),
        ("--directory", "{app}", "sync"),
        ("--project={app}", "lock"),
        ("-q", "run", "--with", "pytest", "pytest"),
    ],
)
def test_a_project_of_the_agents_is_refused_wherever_uv_would_find_it(uv, tmp_path, args):
    app = tmp_path / "app"
    cwd = app / "sub" if "{app}" not in " ".join(args) else tmp_path
    res = run(uv, cwd, *(a.replace("{app}", str(app)) for a in args))
    assert res.returncode == 2 and "is not root's" in res.stderr and "RUN" not in res.stdout, res


def test_roots_project_and_no_project_run(uv, tmp_path):
    assert run(uv, tmp_path / "tests", "run", "pytest").stdout.startswith("RUN run pytest")
    assert run(uv, tmp_path, "run", "pytest").returncode == 0
    # pip and tools read no project: the agent's folder does not stop them
    assert run(uv, tmp_path / "app", "pip", "install", "pytest").returncode == 0


@pytest.mark.parametrize(
    ("args", "seen"),
    [
        (("-p", "3.13", "venv"), "-p python3 venv"),
        (("--python=cpython-3.12", "venv"), "--python=python3 venv"),
        (("--python", ">=3.12", "venv"), "--python python3 venv"),
        (("-p", "/opt/py/bin/python", "venv"), "-p /opt/py/bin/python venv"),  # a path is kept
        (("pip", "install", "pytest", "-p", "no:cacheprovider"), "pip install pytest -p no:cacheprovider"),
    ],
)
def test_a_named_python_version_becomes_the_images_python3(uv, tmp_path, args, seen):
    assert run(uv, tmp_path, *args).stdout.strip() == f"RUN {seen}"
