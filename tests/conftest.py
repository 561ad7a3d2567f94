"""Shared fixtures: real sandbox backends (a real Docker engine, real bubblewrap).

A backend that cannot exist here skips its tests with the reason, unless it is named in
ARBORL_REQUIRE (CI sets `docker,bwrap`): then its absence fails the run instead.
"""

from __future__ import annotations

import os

import pytest

REQUIRED = {x.strip() for x in os.environ.get("ARBORL_REQUIRE", "").split(",") if x.strip()}


def unavailable(component: str, reason: str) -> None:
    """Skip, or fail when CI requires the component."""
    if component in REQUIRED:
        pytest.fail(f"{component} is required (ARBORL_REQUIRE) but unavailable: {reason}")
    pytest.skip(f"{component} unavailable: {reason}")


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
def local_backend():
    from arborl.sandboxes import LocalBackend, SandboxUnavailable

    try:
        return LocalBackend()
    except SandboxUnavailable as e:
        unavailable("bwrap", str(e))


@pytest.fixture(params=["docker", "local"])
def backend(request):
    """Each test using this runs once per backend."""
    return request.getfixturevalue(f"{request.param}_backend")


@pytest.fixture(scope="session")
def tiny_model():
    """Path of the tiny chat model (built on first use, ~15 s; cached under ~/.cache/arborl)."""
    from arborl.agents.tiny import ensure_tiny_model

    return ensure_tiny_model()


@pytest.fixture(scope="session")
def gui_backend(docker_backend):
    """The Docker backend with the arborl/gui image (Xvfb, openbox, xdotool, desktop apps)."""
    from arborl.sandboxes.images import image_exists

    if not image_exists(docker_backend.client, "arborl/gui:latest"):
        unavailable("gui", "no arborl/gui image: run `arborl sandbox build image=gui` (make test does)")
    return docker_backend
