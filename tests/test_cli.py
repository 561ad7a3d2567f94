"""The `arborl` command as a user runs it (a real subprocess, real sandboxes)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def arborl(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", *args], capture_output=True, text=True, timeout=timeout
    )


def test_help_explains_commands_and_overrides():
    res = arborl("--help")
    assert res.returncode == 0
    for word in ("sandbox", "demo", "config", "sandbox=docker|bwrap|auto|ray", "pool.max_size"):
        assert word in res.stdout
    assert arborl("sandbox", "--help").returncode == 0
    assert arborl().returncode == 2  # no command: help, non-zero


def test_config_composes_hydra_overrides():
    res = arborl("config", "sandbox=bwrap", "pool.max_size=3")
    assert res.returncode == 0
    assert "max_size: 3" in res.stdout and "type: bwrap" in res.stdout
    bad = arborl("config", "pool.no_such_key=1")
    assert bad.returncode != 0 and "no_such_key" in bad.stderr


def test_unknown_config_group_option_is_a_clear_error():
    res = arborl("config", "sandbox=kubernetes")
    assert res.returncode != 0 and "kubernetes" in res.stderr


def test_envs_list_shows_builtin_and_user_envs(tmp_path):
    res = arborl("envs", "list")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["ENV", "ID", "SOURCE", "ENTRY", "POINT"]
    ids = [line.split()[0] for line in lines[1:5]]
    assert ids == ["arborl/Code-v0", "arborl/Tool-v0", "arborl/Desktop-v0", "arborl/Web-v0"]
    assert all("built in" in line for line in lines[1:5])
    (tmp_path / "my_envs.py").write_text(
        "import gymnasium\n"
        "from arborl.envs import register_env\n"
        "class Echo(gymnasium.Env):\n"
        '    """Repeats what it is told."""\n'
        "register_env('myorg/Echo-v0', Echo)\n"
    )
    res = subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", "envs", "list", "--import", "my_envs", "--describe"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)},
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "myorg/Echo-v0" in res.stdout and "Repeats what it is told." in res.stdout
    from arborl.envs.registration import BUILTIN_ENVS

    # every env, built-in too, has its summary line under it, before the suites' table
    envs = res.stdout.split("\n\nSUITE")[0].splitlines()
    assert len(envs) == 1 + 2 * (len(BUILTIN_ENVS) + 1)
    assert "--import my_envs" in next(line for line in envs if line.startswith("myorg/Echo-v0"))
    missing = arborl("envs", "list", "--import", "no_such_module_xyz")
    assert missing.returncode == 2 and "cannot import no_such_module_xyz" in missing.stderr


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_demo_runs_end_to_end(backend, request):
    request.getfixturevalue(f"{backend}_backend")  # skips (or fails in CI) if unavailable
    res = arborl("demo", f"sandbox={backend}", "demo.episodes=6", "demo.concurrency=3")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "6/6 episodes fixed the bug" in res.stdout and "demo passed" in res.stdout


def test_sandbox_ls_and_gc(bwrap_backend):
    res = arborl("sandbox", "ls", "sandbox=bwrap")
    assert res.returncode == 0 and "backend" in res.stdout
    res = arborl("sandbox", "gc", "sandbox=bwrap")
    assert res.returncode == 0 and "orphans" in res.stdout
