from __future__ import annotations

import asyncio

import pytest

from arborl.sandboxes import SandboxSpec

SPEC = SandboxSpec(files={"/workspace/hello.txt": "hello\n", "/workspace/pkg/mod.py": "X = 1\n"})


@pytest.fixture(scope="module", params=["docker", "bwrap"])
def shared_sandbox(request):
    """One sandbox per backend for a whole module, created on its own event loop.

    Tests run on other loops, which also checks that a sandbox is not tied to the loop
    that made it. Each test starts from a reset.
    """
    backend = request.getfixturevalue(f"{request.param}_backend")
    sb = asyncio.run(backend.create(SPEC))
    yield sb
    asyncio.run(sb.close())


@pytest.fixture
async def sb(shared_sandbox):
    await shared_sandbox.reset()
    return shared_sandbox
