"""Envs as packages (issue 54 §4): the worked example in tests/packages/arborl-example-env is
installed by pip into a folder of its own (never into the shared venv) and found through its
`arborl.envs` entry point by the real `importlib.metadata`, in fresh processes that have that
folder on PYTHONPATH: `gymnasium.make` and Gymnasium's `check_env`, `arborl eval` (gold 100 %,
empty 0 %), `arborl train`, and `arborl envs list` with each id's source. Two broken packages
(one that fails to import, one whose registration raises) are listed with their errors, logged
once each, and stop nothing else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from train_cli import train_steps

from arborl.tasks.env_packages import BUILT_IN, RUN_TIME, note_registered, registering_as, source_of

EXAMPLE = Path(__file__).parents[1] / "packages" / "arborl-example-env"
SOURCE = "arborl-example-env 0.1.0"
CMD = [sys.executable, "-m", "arborl.cli.main"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example package as pip installs it, in a folder of its own."""
    root = tmp_path_factory.mktemp("env-package")
    shutil.copytree(EXAMPLE, root / "src")  # setuptools writes build/ and *.egg-info beside the sources
    res = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(root / "site"), str(root / "src")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    return root / "site"


def write_distribution(site: Path, name: str, version: str, entry: str, modules: dict[str, str]) -> None:
    """An installed distribution as pip leaves one: its modules and a `.dist-info` with METADATA
    and entry_points.txt, which `importlib.metadata` reads like any other."""
    for module, text in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(text))
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[arborl.envs]\n{entry}\n")


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two broken env packages: one that fails to import, one whose registration raises (it
    registers a suite name that is taken)."""
    site = tmp_path_factory.mktemp("broken-env-packages")
    write_distribution(
        site,
        "broken-import-env",
        "0.2.0",
        "broken = broken_import_env:register",
        {"broken_import_env": "import no_such_module_for_arborl\n"},
    )
    write_distribution(
        site,
        "clashing-env",
        "0.3.0",
        "clash = clashing_env:register",
        {
            "clashing_env": """
            def register():
                from arborl.tasks import Suite, register_suite
                register_suite(Suite("tool-mini", "clash/Nothing-v0", loader=list))
            """
        },
    )
    return site


def run(
    args: list[str], *path: Path, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    pythonpath = os.pathsep.join([*map(str, path), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": pythonpath},
    )


def test_gymnasium_make_finds_the_installed_env_and_check_env_passes(site):
    script = """
    import warnings

    import gymnasium
    from gymnasium.utils.env_checker import check_env

    import arborl.envs
    from arborl.tasks.env_packages import source_of

    # importing arborl loads no package: gymnasium.make of an id it does not know does
    assert "example/Guess-v0" not in gymnasium.registry
    env = gymnasium.make("example/Guess-v0")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=r".*(WARN|ERROR): ")  # a Gymnasium warning fails
        check_env(env.unwrapped)
    env.reset(options={"task": {"id": "t", "secret": 3, "high": 4}})
    steps = [env.step(guess) for guess in ("2", "I say 4", "3")]
    assert [s[0][-1]["content"] for s in steps] == ["Higher.", "Lower.", "Correct, it is 3!"], steps
    assert [(s[1], s[2]) for s in steps] == [(0.0, False), (0.0, False), (1.0, True)], steps
    env.close()
    print(source_of("env", "example/Guess-v0"))
    """
    res = run([sys.executable, "-c", textwrap.dedent(script)], site)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip() == SOURCE


def test_arborl_eval_runs_its_suite_gold_100_empty_0_beside_broken_packages(site, broken_site, tmp_path):
    for agent, rate in (("gold", 1.0), ("empty", 0.0)):
        res = run(
            [*CMD, "eval", "suite=guess-mini", f"agent={agent}", f"run.dir={tmp_path / agent}"],
            site,
            broken_site,
        )
        assert res.returncode == 0, res.stdout + res.stderr
        summary = json.loads((tmp_path / agent / "summary.json").read_text())
        assert summary["instances"] == 4 and summary["resolved_rate"] == rate, summary
        # each broken package is logged once, and the run goes on
        assert res.stderr.count("failed to load") == 2, res.stderr
        assert "broken-import-env 0.2.0" in res.stderr and "clashing-env 0.3.0" in res.stderr


def test_envs_list_shows_each_id_and_suite_with_its_source_and_the_broken_packages(
    site, broken_site, tmp_path
):
    (tmp_path / "my_envs.py").write_text(
        "import gymnasium\n"
        "from arborl.envs import register_env\n"
        "class Echo(gymnasium.Env):\n"
        '    """Repeats what it is told."""\n'
        "register_env('myorg/Echo-v0', Echo)\n"
    )
    res = run([*CMD, "envs", "list", "--import", "my_envs"], site, broken_site, tmp_path, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {line.split()[0]: line for line in res.stdout.splitlines() if line.strip()}
    assert (
        SOURCE in rows["example/Guess-v0"] and "arborl_example_env.env:GuessEnv" in rows["example/Guess-v0"]
    )
    assert "example/Guess-v0" in rows["guess-mini"] and SOURCE in rows["guess-mini"]
    assert BUILT_IN in rows["arborl/Code-v0"] and BUILT_IN in rows["tool-mini"]
    assert "--import my_envs" in rows["myorg/Echo-v0"]
    packages = res.stdout.split("env packages (entry point group arborl.envs):")[1]
    assert (
        f"{SOURCE}  guess = arborl_example_env:register  envs: example/Guess-v0; suites: guess-mini"
        in packages
    )
    assert (
        "broken-import-env 0.2.0  broken = broken_import_env:register  FAILED to load: "
        "ModuleNotFoundError: No module named 'no_such_module_for_arborl'"
    ) in packages
    assert (
        "clashing-env 0.3.0  clash = clashing_env:register  FAILED to load: SuiteError: suite 'tool-mini' is already registered"
        in packages
    )
    assert res.stderr.count("failed to load") == 2, res.stderr


def test_an_unknown_id_names_the_packages_that_failed_to_load(broken_site):
    script = """
    import gymnasium
    import arborl.envs

    try:
        gymnasium.make("nobody/Nothing-v0")
    except gymnasium.error.Error as e:
        print(e)
    """
    res = run([sys.executable, "-c", textwrap.dedent(script)], broken_site)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith("Namespace nobody not found.")  # Gymnasium's own words first
    assert "broken-import-env 0.2.0 (broken = broken_import_env:register): ModuleNotFoundError" in res.stdout


@pytest.mark.slow
def test_arborl_train_runs_on_the_installed_env(site, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    rl = train_steps(
        tmp_path / "run",
        "example/Guess-v0",
        "tasks.train=suite:guess-mini",
        "tasks.eval_suite=guess-mini",
        "tasks.eval_size=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=8",
        steps=1,
    )
    assert rl[0]["rollout/turns"] >= 1


def test_sources_of_built_in_and_run_time_registrations():
    import arborl.envs  # noqa: F401  (registers the built-in envs)
    from arborl.tasks import get_suite

    assert source_of("env", "arborl/Code-v0") == BUILT_IN
    assert get_suite("tool-mini") and source_of("suite", "tool-mini") == BUILT_IN
    note_registered("suite", "test-sources-plain")
    with registering_as("outer"):
        with registering_as("inner"):
            note_registered("suite", "test-sources-inner")
        note_registered("suite", "test-sources-outer")
        note_registered("suite", "test-sources-plain")  # the first registration stays its source
    assert source_of("suite", "test-sources-plain") == RUN_TIME
    assert source_of("suite", "test-sources-inner") == "inner"
    assert source_of("suite", "test-sources-outer") == "outer"
    with registering_as("forced"):
        note_registered("suite", "test-sources-plain", replaced=True)
    assert source_of("suite", "test-sources-plain") == "forced"
