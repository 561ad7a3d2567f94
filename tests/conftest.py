"""Shared fixtures: real sandbox backends (a real Docker engine, real bubblewrap).

A backend that cannot exist here skips its tests with the reason, unless it is named in
ARBORL_REQUIRE (CI sets `docker,bwrap`): then its absence fails the run instead.
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
    """Path of the tiny chat model (built on first use, ~15 s; cached under ~/.cache/arborl)."""
    from arborl.agents.tiny import ensure_tiny_model

    return ensure_tiny_model()


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
