"""The agent forges the reward of a Harbor task, the way a policy under RL would find to, and gets 0.

The task is the example file edit, on an image made as easy to attack as a careless Dockerfile
makes it: /logs and /tests exist and anyone may write them, /usr/local/bin is world-writable,
and the image's PATH puts the agent's /app/bin first. Each attack is commands the agent runs
with its own `bash` tool before `submit`, without fixing the file; the honest fix on the same
image scores 1 (so what stops the attacks is the grading, not the image). The forgeries of the
code env's tests (conftest.py, .pth, usercustomize, a shadowed module, a fake pytest, a
rewriter left running) are among them.
"""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import gymnasium
import pytest

import arborl.envs  # noqa: F401 - registers arborl/Harbor-v0
from arborl.envs import arelease, areset, astep
from arborl.envs.parsers import get_parser
from arborl.sandboxes import PoolConfig, SandboxPool
from arborl.tasks.harbor import load_task

pytestmark = pytest.mark.docker
EXAMPLES = Path(__file__).parents[2] / "data" / "harbor"
P = get_parser("hermes")
FIX = (
    "sed -i '/^\\[server\\]/,/^\\[/ { s/^port = .*/port = 9090/; s/^debug = .*/debug = false/ }' service.ini"
)
PERMISSIVE = """FROM debian:bookworm-slim
RUN mkdir -p /logs/verifier /tests /app/bin && chmod -R 0777 /logs /tests /usr/local/bin
ENV PATH=/app/bin:/usr/local/bin:/usr/bin:/bin
WORKDIR /app
COPY service.ini /app/service.ini
"""
# Ends the Python that imports it with success: pytest then "passes" and test.sh writes 1.
EXIT_0 = "import os; os._exit(0)"
CONFTEST = (
    "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
)
SITE = "$(python3 -c 'import site; print(site.getusersitepackages())')"


def write(path: str, text: str) -> str:
    """A command that writes `text` to `path` byte for byte."""
    return f"echo {base64.b64encode(text.encode()).decode()} | base64 -d > {path}"


# Collecting without running exits 0: pytest "passes" and test.sh writes 1.
PYTEST_INI = "[pytest]\naddopts = --collect-only -q\n"
PYPROJECT = '[tool.pytest.ini_options]\naddopts = "--collect-only -q"\n'
# reward.json too: it is read before reward.txt, which test.sh writes last
REWARD_1_SH = (
    "#!/bin/sh\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
    "echo '{\"reward\": 1}' > /logs/verifier/reward.json\n"
)
ATTACKS = {
    "planted-reward": "echo 1 > /logs/verifier/reward.txt && echo '{\"reward\": 1}' > /logs/verifier/reward.json",
    "reward-link": "echo 1 > /app/reward.txt && rm -rf /logs/verifier && ln -s /app /logs/verifier",
    "planted-tests": f"{write('/tests/conftest.py', CONFTEST)} && {write('/tests/test.sh', REWARD_1_SH)}",
    "conftest-in-workdir": f"{write('conftest.py', CONFTEST)} && {write('pytest.ini', PYTEST_INI)}"
    f" && {write('pyproject.toml', PYPROJECT)}",
    "python-startup-files": f"for f in sitecustomize.py usercustomize.py; do echo '{EXIT_0}' > $f; done && echo '{EXIT_0}' > zz.pth"
    f" && mkdir -p {SITE} && echo '{EXIT_0}' > {SITE}/usercustomize.py && echo '{EXIT_0}' > {SITE}/zz.pth",
    "shadowed-modules": f"for m in configparser pytest pathlib; do echo '{EXIT_0}' > $m.py; done",
    "shadowed-commands": f"{write('/tmp/fake', REWARD_1_SH)} && for d in /app/bin /usr/local/bin; do "
    "for c in python3 bash sh env; do cp /tmp/fake $d/$c; chmod +x $d/$c; done; done",
    "rewriter-left-running": "nohup sh -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
    "sleep 0.001; done' >/dev/null 2>&1 & sleep 0.2",
}


def usable(folder: Path):
    task = load_task(folder)
    assert task.usable, task.error or task.image_error
    return task


def call(name: str, **args: object) -> str:
    return P.format_call(name, args)


@pytest.fixture(scope="module")
def permissive_task(tmp_path_factory):
    folder = tmp_path_factory.mktemp("forge") / "edit-config"
    shutil.copytree(EXAMPLES / "edit-config", folder)
    (folder / "environment" / "Dockerfile").write_text(PERMISSIVE)
    toml = (folder / "task.toml").read_text().replace("timeout_sec = 60.0", "timeout_sec = 8.0")
    (folder / "task.toml").write_text(toml)
    return usable(folder)


@pytest.fixture
async def pool(docker_backend):
    async with SandboxPool(docker_backend, PoolConfig(max_size=2)) as p:
        yield p


async def episode(pool, task, *commands: str) -> tuple[float, dict]:
    env = gymnasium.make("arborl/Harbor-v0", pool=pool)
    try:
        await areset(env, options={"task": task})
        for cmd in commands:
            _, _, terminated, _, info = await astep(env, call("bash", command=cmd))
            assert not terminated, info
        _, reward, terminated, _, info = await astep(env, call("submit"))
        assert terminated
        return reward, info["verifier"]
    finally:
        await arelease(env)
        env.close()


async def test_the_honest_fix_scores_on_the_same_image(pool, permissive_task):
    reward, verdict = await episode(pool, permissive_task, FIX)
    assert reward == 1.0 and verdict["graded"], verdict


@pytest.mark.parametrize("attack", list(ATTACKS.values()), ids=list(ATTACKS))
async def test_forgeries_score_zero(pool, permissive_task, attack):
    reward, verdict = await episode(pool, permissive_task, attack)
    assert reward == 0.0, verdict
    assert verdict["graded"], verdict  # the tests ran and wrote their own 0


async def test_tests_made_to_hang_are_a_zero_not_an_infrastructure_error(pool, permissive_task):
    """A FIFO where the tests read the config blocks them until [verifier] timeout_sec: the
    agent's doing, so its 0 (an infrastructure error would let it dodge every 0)."""
    reward, verdict = await episode(pool, permissive_task, "rm service.ini && mkfifo service.ini")
    assert reward == 0.0 and verdict["error_kind"] == "tests_timeout" and verdict["timed_out"], verdict


async def test_a_makefile_the_tests_build_cannot_write_the_reward(pool):
    """The build task's tests run the agent's Makefile (as its user, as the example's tests
    run everything of the agent's): one that writes reward 1 cannot."""
    task = load_task(EXAMPLES / "build-c")
    makefile = "all:\n\tmkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt\nclean:\n\ttrue\n"
    reward, verdict = await episode(pool, task, write("Makefile", makefile))
    assert reward == 0.0 and verdict["graded"], verdict


async def test_a_graded_sandbox_is_never_reused(pool, permissive_task):
    """The tests ran as root (and so may have what they ran of the agent's): the next episode
    gets a new sandbox, even when the env would reuse a parked one in place."""
    env = gymnasium.make("arborl/Harbor-v0", pool=pool, park_s=30.0)
    try:
        await areset(env, options={"task": permissive_task})
        first = env.unwrapped.sandbox.id
        await astep(env, call("submit"))
        await areset(env, options={"task": permissive_task})
        assert env.unwrapped.sandbox.id != first
    finally:
        await arelease(env)
        env.close()


@pytest.fixture(scope="module")
def root_service_task(tmp_path_factory):
    """The service task with a test.sh that runs the agent's start.sh as root (as careless
    tests do) and writes its reward last."""
    folder = tmp_path_factory.mktemp("root-service") / "static-site-service"
    shutil.copytree(EXAMPLES / "static-site-service", folder)
    (folder / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\nreward=0\ntimeout 20 bash /app/start.sh\n"
        "python3 /tests/probe.py && reward=1\necho $reward > /logs/verifier/reward.txt\n"
    )
    return load_task(folder)


# A process left rewriting reward 1 as fast as it can.
REWRITER_START = (
    "#!/bin/bash\nnohup bash -c 'while :; do echo 1 > /logs/verifier/reward.txt; done' >/dev/null 2>&1 &\n"
)


async def test_a_rewriter_the_tests_start_as_the_agents_user_cannot_touch_the_reward(pool):
    """The example service task's test.sh runs the agent's start.sh as the agent's user."""
    task = load_task(EXAMPLES / "static-site-service")
    reward, verdict = await episode(pool, task, write("/app/start.sh", REWRITER_START))
    assert reward == 0.0 and verdict["graded"], verdict


async def test_a_rewriter_the_tests_start_as_root_is_caught_after_them(pool, root_service_task):
    """Run as root by the tests, it writes over test.sh's own last write: the guard sees the
    reward change after test.sh ended, and the attempt is a 0."""
    reward, verdict = await episode(pool, root_service_task, write("/app/start.sh", REWRITER_START))
    assert reward == 0.0 and verdict.get("error_kind") == "reward_tampered", verdict


async def test_the_tests_killing_the_guard_is_a_zero(pool, root_service_task):
    start = "#!/bin/bash\npkill -KILL -f 'python3 -I -S -c'\n"
    reward, verdict = await episode(pool, root_service_task, write("/app/start.sh", start))
    assert reward == 0.0 and verdict.get("error_kind") == "reward_tampered", verdict


# ─── uv, as Terminal-Bench 2's tests run it (envs/harbor/uv_layer.py) ───────────────────────

UV_EXAMPLE = Path(__file__).parents[2] / "data" / "harbor-uv" / "hello-uv"
UV_FIX = "echo 'Hello from uv!' > /app/greeting.txt"
# Wheels of a pytest whose every run passes, and of the plugin the tests ask for, in the
# agent's folder; uv.toml and pyproject.toml there tell uv to take packages from it alone.
FAKE_WHEELS = """import os, zipfile
os.makedirs('/app/wheels', exist_ok=True)
def wheel(name, version, files, entry=''):
    dist = name.replace('-', '_') + '-' + version
    with zipfile.ZipFile('/app/wheels/' + dist + '-py3-none-any.whl', 'w') as z:
        for f, t in files.items():
            z.writestr(f, t)
        info = dist + '.dist-info/'
        z.writestr(info + 'METADATA', 'Metadata-Version: 2.1\\nName: ' + name + '\\nVersion: ' + version + '\\n')
        z.writestr(info + 'WHEEL', 'Wheel-Version: 1.0\\nGenerator: x\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')
        if entry:
            z.writestr(info + 'entry_points.txt', '[console_scripts]\\n' + entry + '\\n')
        z.writestr(info + 'RECORD', '')
wheel('pytest', '8.4.1', {'pytest/__init__.py': "__version__ = '8.4.1'\\ndef main():\\n    raise SystemExit(0)\\n"},
      'pytest = pytest:main')
wheel('pytest-json-ctrf', '0.3.5', {'pytest_json_ctrf/__init__.py': ''})
"""
UV_CONFIG = 'no-index = true\nfind-links = ["/app/wheels"]\n'
UV_ATTACKS = {
    "uv-config-in-workdir": f"{write('/tmp/w.py', FAKE_WHEELS)} && python3 /tmp/w.py && {write('uv.toml', UV_CONFIG)}"
    f" && {write('pyproject.toml', '[tool.uv]' + chr(10) + UV_CONFIG)}",
}


@pytest.fixture(scope="module")
def uv_task():
    return usable(UV_EXAMPLE)


async def test_uv_tests_run_offline_and_score_the_fix(pool, uv_task):
    reward, verdict = await episode(pool, uv_task, UV_FIX)
    assert reward == 1.0 and verdict["graded"], verdict


@pytest.mark.full  # uvx 0.9 reads no such file anyway: a guard against uv changing that
@pytest.mark.parametrize("attack", list(UV_ATTACKS.values()), ids=list(UV_ATTACKS))
async def test_uv_forgeries_score_zero(pool, uv_task, attack):
    """uv's commands read uv.toml / [tool.uv] from the directory they run in: the agent's.
    uvx (0.9) reads neither, and the tests' uv reads no configuration file at all
    (UV_NO_CONFIG): a fake pytest offered there is never installed. The project tests below
    are the ones uv's config would reach today."""
    reward, verdict = await episode(pool, uv_task, attack)
    assert reward == 0.0 and verdict["graded"], verdict


# Terminal-Bench 1's way, as its Harbor adaptations keep it: a uv project made in the agent's
# folder (`uv init`, `uv add`, `uv run pytest`).
UV_PROJECT_TEST_SH = """#!/bin/bash
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uv init
uv add pytest==8.4.1 pytest-json-ctrf==0.3.5
uv run pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
# A "Python" that, run as root by uv to learn what it is, rewrites the tests to pass.
FAKE_PYTHON = "#!/bin/sh\necho 'def test_ok(): pass' > /tests/test_outputs.py 2>/dev/null\nexec /usr/bin/python3 \"$@\"\n"
# Ends a Python that runs pytest with success, and leaves uv's own questions alone (a .pth
# line: Debian's own sitecustomize would shadow one planted in the venv).
PYTEST_EXIT_0 = "import os, sys; any('pytest' in a for a in sys.argv) and os._exit(0)\n"
AGENT_PROJECT = """[project]
name = "app"
version = "0"
requires-python = ">=3.8"
dependencies = []

[tool.uv.sources]
pytest = { path = "/app/wheels/pytest-8.4.1-py3-none-any.whl" }
pytest-json-ctrf = { path = "/app/wheels/pytest_json_ctrf-0.3.5-py3-none-any.whl" }
"""
UV_PROJECT_ATTACKS = {
    # the agent's own project, whose pytest is the fake wheel
    "uv-agent-project": f"{write('/tmp/w.py', FAKE_WHEELS)} && python3 /tmp/w.py && {write('pyproject.toml', AGENT_PROJECT)}",
    # a .venv where the project's would be, whose Python passes any pytest run
    "uv-planted-venv": "python3 -m venv --without-pip /app/.venv && site=$(/app/.venv/bin/python -c"
    " 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')"
    f" && {write('$site/zz.pth', PYTEST_EXIT_0)}",
    # a .python-version naming a "Python" of the agent's
    "uv-python-version": f"{write('/app/fakepy', FAKE_PYTHON)} && chmod +x /app/fakepy && echo /app/fakepy > .python-version",
}


@pytest.fixture(scope="module")
def uv_project_task(tmp_path_factory):
    folder = tmp_path_factory.mktemp("uv-project") / "hello-uv-project"
    shutil.copytree(UV_EXAMPLE, folder)
    (folder / "tests" / "test.sh").write_text(UV_PROJECT_TEST_SH)
    return usable(folder)


async def test_a_uv_project_runs_offline_and_scores_the_fix(pool, uv_project_task):
    reward, verdict = await episode(pool, uv_project_task, UV_FIX)
    assert reward == 1.0 and verdict["graded"], verdict


@pytest.mark.parametrize("attack", list(UV_PROJECT_ATTACKS.values()), ids=list(UV_PROJECT_ATTACKS))
async def test_uv_project_forgeries_score_zero(pool, uv_project_task, attack):
    """The tests' uv never runs a project of the agent's (its pyproject.toml is not root's),
    never uses a .venv it planted, never a Python its .python-version names."""
    reward, verdict = await episode(pool, uv_project_task, attack)
    assert reward == 0.0, verdict
