"""Web env fixtures: real Chromium, real site servers, on the Docker and the bubblewrap backend.

Envs made here share the env event loop's pools, so a web stack (browser + sites) started by
one test is reused, warm, by the next; the stacks are closed when the web tests end.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def web_bwrap_backend(bwrap_backend, web_chromium):
    return bwrap_backend


@pytest.fixture(params=[pytest.param("docker", marks=pytest.mark.docker), "bwrap"])
def web_backend(request):
    """Each test using this runs once on Docker (browser and sites in containers) and once
    on the bubblewrap backend (host processes)."""
    return request.getfixturevalue(f"web_{request.param}_backend")


@pytest.fixture(scope="session", autouse=True)
def _close_web_stacks():
    """Close the warm stacks when the web tests are done (they hold pool slots)."""
    yield
    from arborl.envs.event_loop import get_env_loop
    from arborl.envs.web import close_stack_pools

    rt = get_env_loop()
    rt.run(close_stack_pools(rt.loop), timeout=120)


@pytest.fixture
def make_web_env(web_backend):
    """`make_web_env(**kwargs)`: `gymnasium.make("arborl/Web-v0")` on the test's backend, closed after."""
    import gymnasium

    import arborl.envs  # noqa: F401 - registers arborl/Web-v0

    made: list[Any] = []

    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("backend", web_backend)
        env = gymnasium.make("arborl/Web-v0", **kwargs)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()
