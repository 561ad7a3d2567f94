"""Desktop env fixtures: real containers of the arborl/gui image with a real Xvfb inside.

One env is shared by the whole module that asks for it: its sandbox is parked between tests
and reset in place by the next reset (what the env does in training), so the tests pay for
one container, not one per test.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def desktop(gui_backend):
    """A DesktopEnv over real containers, shared by a test module, closed at its end."""
    import gymnasium

    env = gymnasium.make("arborl/Desktop-v0", backend=gui_backend, park_s=60.0)
    yield env
    env.close()
