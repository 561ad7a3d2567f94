"""arborl's envs over OpenEnv's protocol: `arborl envs serve` (or `make_app` / `serve`).

    arborl envs serve --suite tool-mini --port 8001 --token-file token

Any trainer that speaks OpenEnv (its `EnvClient`, TRL's OpenEnv integration, ...) can then
run arborl's code, tool, web and desktop envs. The server is OpenEnv's own (`create_app`
from `openenv-core`: HTTP `/reset` `/step` `/state` `/schema` `/health` and WebSocket `/ws`
sessions, one arborl env per session); this module wraps a registered arborl env as an
OpenEnv `Environment` and guards it:

- action `{"text": "<the model's reply>"}` (arborl envs take the reply as text);
- observation `{"messages": [...], "info": {...}, "truncated": bool}` plus OpenEnv's
  `reward` and `done` (terminated or truncated): the chat messages the step added, the
  step's `info` as JSON (screenshots are not sent);
- reset takes `task`, a task id of the served suite (nothing: its first task, or the env's
  default without a suite), `seed` and `episode_id`, and nothing else: a task is code, so
  clients name tasks and never send them (`openenv_tasks.py`);
- every request but `/health` carries the server's token, and the server listens beyond
  loopback only when asked (`openenv_access.py`);
- state `{"episode_id", "step_count", "task_id", "active"}`;
- `env_kwargs` go to `gymnasium.make`; a `backend` given by name (`"bwrap"`, `"docker"`) or
  config mapping becomes one sandbox backend shared by the server's sessions;
- `serve` stops on SIGTERM as on SIGINT: sessions closed, every sandbox it made removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from .openenv_access import Receive, Scope, Send, TokenGate, check_bind
from .openenv_tasks import ServedTasks, TaskRefused
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


#: Every env a server made and has not closed: what a shutdown closes if a session did not.
_LIVE: weakref.WeakSet[ArborlOpenEnv] = weakref.WeakSet()


class ArborlOpenEnv(Environment):
    """A registered arborl env as an OpenEnv `Environment` (one per session)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self, env_id: str, env_kwargs: Mapping[str, Any] | None = None, tasks: ServedTasks | None = None
    ) -> None:
        super().__init__()
        import arborl.envs  # noqa: F401 - registers the built-in envs

        self.env_id = env_id
        kwargs = dict(env_kwargs or {})
        if isinstance(kwargs.get("backend"), str | Mapping):  # "bwrap", {"type": "docker", ...}
            kwargs["backend"] = _backend(kwargs["backend"])
        self.env = gymnasium.make(env_id, **kwargs)
        self.tasks = tasks or ServedTasks()
        self._state = State(episode_id=None, step_count=0)
        self._closed = False
        _LIVE.add(self)

    def reset(
        self, seed: Any = None, episode_id: Any = None, task: Any = None, **kwargs: Any
    ) -> ArborlObservation:
        """`task`: a task id of the served suite; anything else a client sends is refused
        (OpenEnv passes every field of the request here, so unknown ones arrive in kwargs)."""
        self.tasks.check_reset(seed, episode_id, kwargs)
        picked = self.tasks.pick(task)
        obs, info = self.env.reset(seed=seed, options={"task": picked} if picked is not None else None)
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
        if self._closed:
            return
        self._closed = True
        _LIVE.discard(self)
        self.env.close()


class QuietDisconnect:
    """ASGI middleware: closing a WebSocket its client already closed is no error.

    OpenEnv's `/ws` handler closes the socket on its way out of every session; when the client
    left first (the normal end of a session) uvicorn raises `ClientDisconnected`, which Starlette
    turns into an "Exception in ASGI application" traceback per disconnect.
    """

    def __init__(self, app: Callable[[Scope, Receive, Send], Any]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return

        async def send_quietly(message: Any) -> None:
            try:
                await send(message)
            except OSError:  # uvicorn's ClientDisconnected
                if message.get("type") != "websocket.close":
                    raise

        await self.app(scope, receive, send_quietly)


async def _refused(request: Any, exc: Exception) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse({"detail": str(exc)}, status_code=400)


def make_app(
    env_id: str,
    *,
    token: str,
    tasks: ServedTasks | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    max_sessions: int = 4,
) -> Any:
    """OpenEnv's FastAPI app serving `env_id` (each WebSocket session gets its own env), open
    only to requests that carry `token`; clients pick tasks of `tasks` by id."""
    tasks = tasks or ServedTasks()
    factory: Callable[[], ArborlOpenEnv] = lambda: ArborlOpenEnv(env_id, env_kwargs, tasks)  # noqa: E731
    app = create_app(
        factory, ArborlAction, ArborlObservation, env_name=env_id, max_concurrent_envs=max_sessions
    )
    app.add_exception_handler(TaskRefused, _refused)  # HTTP /reset: 400 with the reason, not a 500
    app.add_middleware(QuietDisconnect)
    app.add_middleware(TokenGate, token=token)  # added last: the outermost, before any route
    return app


def close_everything() -> None:
    """Close the envs still open and remove every sandbox this process made (its pools)."""
    from .event_loop import get_env_loop

    for env in list(_LIVE):
        with contextlib.suppress(Exception):
            env.close()
    get_env_loop().shutdown()


async def _close_at_shutdown() -> None:
    await asyncio.to_thread(close_everything)


def serve(
    env_id: str,
    *,
    token: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    tasks: ServedTasks | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    max_sessions: int = 4,
    allow_remote: bool = False,
) -> None:
    """Serve `env_id` over OpenEnv's protocol until SIGINT or SIGTERM; then close every
    session and remove every sandbox the server made.

    Raises `AccessError` for a `host` beyond loopback unless `allow_remote`.
    """
    import uvicorn

    check_bind(host, allow_remote)
    app = make_app(env_id, token=token, tasks=tasks, env_kwargs=env_kwargs, max_sessions=max_sessions)
    # uvicorn answers SIGTERM like SIGINT (a graceful shutdown), then raises the signal again.
    # SIGINT ends as KeyboardInterrupt, so exit hooks run; SIGTERM's default action kills the
    # process at once, past every exit hook. So the cleanup runs at application shutdown,
    # after uvicorn has closed the sessions, and once more here for the other ways out.
    app.router.on_shutdown.append(_close_at_shutdown)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=30)
    server = uvicorn.Server(config)
    received: list[int] = []
    handle_exit = server.handle_exit

    def note_signal(sig: int, frame: Any) -> None:
        received.append(sig)
        handle_exit(sig, frame)

    server.handle_exit = note_signal  # type: ignore[method-assign]  # uvicorn installs it per signal
    try:
        server.run()
    finally:
        close_everything()
    if signal.SIGINT in received:
        # uvicorn raises SIGINT again after its graceful shutdown, into asyncio's runner, which
        # turns it into a cancellation of the server's task; a task that has already finished
        # never sees it, and the process would exit 0 (seen under load). End as SIGINT ends.
        raise KeyboardInterrupt
