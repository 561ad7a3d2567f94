"""arborl's envs over OpenEnv's protocol: `arborl envs serve ID` (or `make_app` / `serve`).

    arborl envs serve arborl/Tool-v0 --suite tool-mini --port 8001

Any trainer that speaks OpenEnv (its `EnvClient`, TRL's OpenEnv integration, ...) can then
run arborl's code, tool, web and desktop envs. The server is OpenEnv's own (`create_app`
from `openenv-core`: HTTP `/reset` `/step` `/state` `/schema` `/health` and WebSocket `/ws`
sessions, one arborl env per session); this module only wraps a registered arborl env as an
OpenEnv `Environment`:

- action `{"text": "<the model's reply>"}` (arborl envs take the reply as text);
- observation `{"messages": [...], "info": {...}, "truncated": bool}` plus OpenEnv's
  `reward` and `done` (terminated or truncated): the chat messages the step added, the
  step's `info` as JSON (screenshots are not sent);
- reset takes `seed` and `task`: a task id of the served suite, a task as JSON (what the
  env's `reset(options={"task": ...})` accepts), or nothing (the suite's first task, else
  the env's default);
- state `{"episode_id", "step_count", "task_id", "active"}`;
- `env_kwargs` go to `gymnasium.make`; a `backend` given by name (`"local"`, `"docker"`) or
  config mapping becomes one sandbox backend shared by the server's sessions.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from .spaces import observation_messages


class ArborlAction(Action):
    """One model reply, as text."""

    text: str = Field(..., description="the model's reply (a tool call, a browser action, ...)")


class ArborlObservation(Observation):
    """The messages one reset or step added, and its info."""

    messages: list[dict[str, Any]] = Field(default_factory=list, description="chat messages {role, content}")
    info: dict[str, Any] = Field(default_factory=dict, description="the step's info, as JSON")
    truncated: bool = Field(False, description="a budget or an infrastructure failure ended the episode")


_BACKENDS: dict[str, Any] = {}


def _backend(spec: str | Mapping[str, Any]) -> Any:
    """One sandbox backend per config for the whole server (its sessions share the pool)."""
    from arborl.sandboxes.factory import make_backend

    config = {"type": spec} if isinstance(spec, str) else dict(spec)
    key = json.dumps(config, sort_keys=True)
    if key not in _BACKENDS:
        _BACKENDS[key] = make_backend(config)
    return _BACKENDS[key]


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=lambda o: f"<{type(o).__name__}>"))


class ArborlOpenEnv(Environment):
    """A registered arborl env as an OpenEnv `Environment` (one per session)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self, env_id: str, env_kwargs: Mapping[str, Any] | None = None, suite: str | None = None
    ) -> None:
        super().__init__()
        import arborl.envs  # noqa: F401 - registers the built-in envs

        self.env_id = env_id
        kwargs = dict(env_kwargs or {})
        if isinstance(kwargs.get("backend"), str | Mapping):  # "local", {"type": "docker", ...}
            kwargs["backend"] = _backend(kwargs["backend"])
        self.env = gymnasium.make(env_id, **kwargs)
        self.suite = None
        if suite is not None:
            from arborl.tasks import get_suite

            self.suite = get_suite(suite)
        self._state = State(episode_id=None, step_count=0)

    def _task(self, task: Any) -> Any:
        if isinstance(task, str):
            if self.suite is None:
                raise ValueError(f"task {task!r} is an id, but this server serves no suite (--suite)")
            return self.suite.task(task)
        if task is None and self.suite is not None:
            return self.suite.tasks()[0]
        return task

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, task: Any = None, **kwargs: Any
    ) -> ArborlObservation:
        task = self._task(task)
        obs, info = self.env.reset(seed=seed, options={"task": task} if task is not None else None)
        self._state = State(
            episode_id=episode_id or uuid.uuid4().hex, step_count=0, task_id=info.get("task_id", "")
        )
        return ArborlObservation(
            messages=[dict(m) for m in observation_messages(obs)], info=_jsonable(info), reward=None
        )

    def step(self, action: ArborlAction, timeout_s: float | None = None, **kwargs: Any) -> ArborlObservation:
        obs, reward, terminated, truncated, info = self.env.step(action.text)
        self._state.step_count += 1
        return ArborlObservation(
            messages=[dict(m) for m in observation_messages(obs)],
            info=_jsonable(info),
            reward=float(reward),
            done=bool(terminated or truncated),
            truncated=bool(truncated),
        )

    @property
    def state(self) -> State:
        state = self._state.model_copy()
        state.active = bool(getattr(self.env.unwrapped, "active", False))
        return state

    def get_metadata(self) -> EnvironmentMetadata:
        doc = (type(self.env.unwrapped).__doc__ or "").strip().splitlines()
        return EnvironmentMetadata(name=self.env_id, description=doc[0] if doc else self.env_id, version="0")

    def close(self) -> None:
        self.env.close()


def make_app(
    env_id: str,
    *,
    suite: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    max_sessions: int = 4,
) -> Any:
    """OpenEnv's FastAPI app serving `env_id` (each WebSocket session gets its own env)."""
    factory: Callable[[], ArborlOpenEnv] = lambda: ArborlOpenEnv(env_id, env_kwargs, suite)  # noqa: E731
    return create_app(
        factory, ArborlAction, ArborlObservation, env_name=env_id, max_concurrent_envs=max_sessions
    )


def serve(
    env_id: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    suite: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    max_sessions: int = 4,
) -> None:
    """Serve `env_id` over OpenEnv's protocol until interrupted."""
    import uvicorn

    app = make_app(env_id, suite=suite, env_kwargs=env_kwargs, max_sessions=max_sessions)
    uvicorn.run(app, host=host, port=port, log_level="warning")
