"""Env test fixtures: real sandboxes through the env event loop, and example envs registered
before collection so the `check_env` sweep over the registry covers them too.

Envs made with `backend=<fixture backend>` share one pool per backend on the env event loop's
loop for the whole session (sandboxes are reused across tests, reset in place).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import arborl.envs
from arborl.envs import register_env
from arborl.envs.adapters import FourTupleAdapter

DOCS = Path(__file__).resolve().parents[2] / "docs" / "envs.md"


def user_env_snippet() -> str:
    """The user-env example exactly as docs/envs.md shows it."""
    text = DOCS.read_text()
    m = re.search(r"<!-- user-env:start -->\n```python\n(.*?)```\n<!-- user-env:end -->", text, re.DOTALL)
    assert m, "docs/envs.md lost its user-env example markers"
    return m.group(1)


def register_user_env_example() -> dict[str, Any]:
    """Run the example's definition part (up to its register_env line)."""
    code = user_env_snippet()
    definition = code[: code.index("register_env(")]
    definition += code[code.index("register_env(") :].split("\n", 1)[0] + "\n"
    namespace: dict[str, Any] = {"__name__": "arborl_docs_example"}
    exec(compile(definition, str(DOCS), "exec"), namespace)
    return namespace


class GuessEnv:
    """An rLLM-style env: reset() -> (obs, info), step(action) -> (obs, reward, done, info)."""

    def __init__(self, secret: int = 7, max_tries: int = 3) -> None:
        self.secret, self.max_tries, self.tries = secret, max_tries, 0
        self.closed = 0

    @classmethod
    def from_dict(cls, task: dict[str, Any]) -> GuessEnv:
        return cls(secret=int(task["secret"]), max_tries=int(task.get("max_tries", 3)))

    def reset(self) -> tuple[str, dict[str, Any]]:
        self.tries = 0
        return "Guess my number between 1 and 10.", {}

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        self.tries += 1
        if action.strip() == str(self.secret):
            return "Right!", 1.0, True, {}
        out_of_tries = self.tries >= self.max_tries
        info = {"TimeLimit.truncated": True} if out_of_tries else {}
        return "Wrong, try again.", 0.0, out_of_tries, info

    def close(self) -> None:
        self.closed += 1


register_user_env_example()
register_env(
    "arborl-test/Guess-v0",
    FourTupleAdapter,
    kwargs={"env_factory": GuessEnv.from_dict, "default_task": {"id": "g", "secret": 7}},
)


@pytest.fixture(scope="session")
def env_backend(docker_backend):
    """The backend env tests run real episodes on: Docker containers."""
    return docker_backend


@pytest.fixture
def make_env(env_backend):
    """`make_env(id, **kwargs)`: gymnasium.make on the test backend, closed after the test."""
    import gymnasium

    made: list[Any] = []

    def make(env_id: str, **kwargs: Any) -> Any:
        kwargs.setdefault("backend", env_backend)
        env = gymnasium.make(env_id, **kwargs)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


@pytest.fixture
def leased(env_backend):
    """`leased()`: how many sandboxes the runtime pool of `env_backend` has lent out now."""
    pool = arborl.envs.event_loop.default_pool(env_backend)

    async def count() -> int:  # read on the pool's own loop
        return int(pool.stats()["in_use"])

    return lambda: arborl.envs.event_loop.get_env_loop().run(count())
