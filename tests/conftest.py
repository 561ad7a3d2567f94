"""Shared fixtures: real sandbox backends (a real Docker engine, real bubblewrap).

A backend that cannot exist here skips its tests with the reason, unless it is named in
ARBORL_REQUIRE (CI sets `docker,bwrap`): then its absence fails the run instead.

`make test` runs the suite on two pytest-xdist workers (`-n 2 --dist loadgroup`), each a
process with its own session fixtures, on one Docker engine and one machine. What they share
is kept safe here and in the marks: a session fixture that builds something both use builds
it under `workers_lock` (the other waits, then reuses it); the tests that start a Ray cluster
carry `xdist_group("ray")`, so they run one after another on one worker; and a test that uses
a module- or class-scoped fixture (a vLLM engine, a desktop container) runs on the worker of
the rest of its module, so the module starts that once (`pytest_collection_modifyitems`).
"""

from __future__ import annotations

import os
import sys

import pytest

# `python -m pytest` (make test) puts the repo root on sys.path, where the layer folders would
# shadow third-party top-level packages: transformers then imports our kernels/ as the Hub's
# `kernels` package, and vLLM's CPU workers crash on it. arborl is imported as `arborl.*` only.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _ROOT]

from arborl_require import REQUIRED, unavailable  # noqa: E402,F401  (re-exported for fixtures)

# a state hash that fails is a bug here, not the counted warning it is in a run (envs/state_hash.py);
# set in the environment so that the CLI and workers tests start see it too
os.environ.setdefault("ARBORL_STRICT_STATE_HASH", "1")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]):
    """Before xdist's own hook turns each test's xdist_group into its id: a test without a
    group that uses a module- or class-scoped fixture joins its module's group (xdist would
    otherwise split the module over both workers, and each would build the fixture, a 30 s
    vLLM start or a desktop container, for its half)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        defs = [
            info.name2fixturedefs[name][-1] for name in info.names_closure if info.name2fixturedefs.get(name)
        ]
        if any(fixturedef.scope in ("module", "class") for fixturedef in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    yield


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to run on several workers where xdist would ignore the groups (so two Ray
    clusters could start at once): pytest 9.2 with xdist 3.8 (pytest-dev/pytest-xdist#1386;
    constraints.txt pins pytest below 9.2)."""
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return
    import xdist

    xdist_version = tuple(int(p) for p in xdist.__version__.split(".")[:2])
    if config.getoption("numprocesses") and pytest.version_tuple >= (9, 2) and xdist_version <= (3, 8):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} with pytest-xdist {xdist.__version__} ignores xdist_group "
            "(pytest-dev/pytest-xdist#1386): pip install -c constraints.txt 'pytest<9.2', or run without -n"
        )


@pytest.fixture(scope="session")
def workers_lock(tmp_path_factory):
    """`with workers_lock(name):` holds a file lock that the xdist workers of this run share
    (in the parent of each worker's temp dir, pytest-xdist's documented pattern), so that a
    session fixture building something both use (images, ...) builds it once: the first
    worker builds, the other waits and finds it built. Without xdist it locks a private dir."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent

    def lock(name: str) -> FileLock:
        return FileLock(str(root / f"{name}.lock"))

    return lock


@pytest.fixture(scope="session")
def docker_backend():
    from arborl.sandboxes import DEFAULT_IMAGE, DockerBackend, SandboxUnavailable
    from arborl.sandboxes.images import image_exists

    try:
        backend = DockerBackend()
    except SandboxUnavailable as e:
        unavailable("docker", str(e))
    if not image_exists(backend.client, DEFAULT_IMAGE):
        unavailable("docker", f"no {DEFAULT_IMAGE} image: run `arborl sandbox build` (make test does)")
    return backend


@pytest.fixture(scope="session")
def bwrap_backend():
    from arborl.sandboxes import BwrapBackend, SandboxUnavailable

    try:
        return BwrapBackend()
    except SandboxUnavailable as e:
        unavailable("bwrap", str(e))


@pytest.fixture(params=["docker", "bwrap"])
def backend(request):
    """Each test using this runs once per backend."""
    return request.getfixturevalue(f"{request.param}_backend")


@pytest.fixture(scope="session")
def tiny_model():
    """Path of the tiny chat model (built on first use, ~15 s; cached under ~/.cache/arborl).
    No `workers_lock` needed: `ensure_tiny_model` itself builds once under a lock beside the
    cache, for any processes that start together (workers, benchmark seeds)."""
    from arborl.agents.tiny import ensure_tiny_model

    return ensure_tiny_model()


@pytest.fixture(scope="session")
def tiny_vlm():
    """Path of the tiny vision-language model (Qwen2-VL architecture; built on first use,
    ~5 s, from the tiny model's tokenizer; cached and locked like it)."""
    from arborl.agents.tiny_vlm import ensure_tiny_vlm

    return ensure_tiny_vlm()


@pytest.fixture(scope="session")
def web_chromium():
    """Debian's Chromium on the host (the web env's browser on the bubblewrap backend)."""
    import shutil

    path = shutil.which("chromium")
    if path is None:
        unavailable("browser", "no Debian chromium: apt-get install chromium (scripts/setup.sh does)")
    return path


@pytest.fixture(scope="session")
def web_docker_backend(docker_backend):
    """The Docker backend with the arborl/gui image the web env's browser runs in."""
    from arborl.sandboxes.images import image_exists

    if not image_exists(docker_backend.client, "arborl/gui:latest"):
        unavailable("docker", "no arborl/gui image: run `arborl sandbox build image=gui` (make test does)")
    return docker_backend


@pytest.fixture(scope="session")
def gui_backend(docker_backend):
    """The Docker backend with the arborl/gui image (Xvfb, openbox, xdotool, desktop apps)."""
    from arborl.sandboxes.images import image_exists

    if not image_exists(docker_backend.client, "arborl/gui:latest"):
        unavailable("gui", "no arborl/gui image: run `arborl sandbox build image=gui` (make test does)")
    return docker_backend


@pytest.fixture(scope="session")
def official():
    """The official SWE-bench grader's functions (`swebench`, installed --no-deps by setup)."""
    from arborl.tasks.swebench.official import official_harness

    harness = official_harness()
    if harness is None:
        unavailable(
            "swebench", "pip install --no-deps swebench==5.0.2 unidiff==1.0.1 (scripts/setup.sh does)"
        )
    return harness
