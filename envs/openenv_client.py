"""Any OpenEnv environment as an arborl env: `OpenEnvEnv`, text in, chat messages out.

    register_env("myorg/Echo-v0", OpenEnvEnv, kwargs={"base_url": "http://127.0.0.1:8001",
                                                       "action_field": "message"})
    env = gymnasium.make("myorg/Echo-v0")
    obs, info = env.reset()                       # OpenEnv reset → the first user message
    obs, reward, terminated, truncated, info = env.step("hello")   # → {"message": "hello"}

OpenEnv (Meta / Hugging Face, `openenv-core`) serves an environment over HTTP and a
WebSocket session (`/ws`: reset, step, state, close); its observations and actions are JSON
objects described by the server's `/schema`. The adapter speaks that protocol through
OpenEnv's own `GenericEnvClient` and maps it to arborl's contract:

- the model's reply becomes the action: the whole reply under `action_field` (an env whose
  action is one text field, e.g. a chat message or code), or, without one, the last JSON
  object in the reply (the model writes the action's fields);
- the observation becomes one user message: the `observation_field` text if given, else
  the observation's JSON; `reward` None counts 0, `done` ends the episode (terminated);
- where the server runs: `base_url` (a server someone runs), or `image` (a Docker image that
  serves OpenEnv on port 8000): the env starts the container on a loopback port at its first
  reset, waits for `/health`, and removes it when it closes (labelled `arborl.openenv`, so
  `remove_leftover_containers()` finds any a killed process left).

A task is an `OpenEnvTask` (its `reset` keyword arguments, e.g. a seed or a task name the
server knows, and an optional instruction put before the first observation) or nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import urllib.request
from typing import Any, ClassVar, Literal

from pydantic import Field

from arborl.tasks import Task

from .base import Step, TaskError, TextEnv
from .event_loop import get_env_loop

LABEL = "arborl.openenv"


class OpenEnvTask(Task):
    """One episode of an OpenEnv environment."""

    kind: Literal["openenv"] = "openenv"
    reset: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the server's reset")
    instruction: str = Field("", description="put before the first observation (the server may give its own)")


class OpenEnvError(RuntimeError):
    """The OpenEnv server could not be started or reached; the message says which and how."""


class OpenEnvEnv(TextEnv):
    """An OpenEnv environment (a running server or a Docker image) behind arborl's contract."""

    task_type: ClassVar[type[OpenEnvTask]] = OpenEnvTask
    default_task: ClassVar[Any] = OpenEnvTask(id="openenv")

    def __init__(
        self,
        *,
        base_url: str | None = None,
        image: str | None = None,
        action_field: str | None = None,
        observation_field: str | None = None,
        system_prompt: str | None = None,
        start_timeout_s: float = 60.0,
        message_timeout_s: float = 60.0,
        docker_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            base_url: where a server already runs (http://host:port).
            image: a Docker image serving OpenEnv on port 8000 (started per env, on loopback).
            action_field: put the whole reply in this action field (else: parse a JSON object).
            observation_field: show this observation field as the message (else: its JSON).
            system_prompt: a system message before the first observation.
            start_timeout_s: how long the container may take to answer /health.
            message_timeout_s: how long one reset/step may take on the server.
            docker_options: more keyword arguments of docker's `containers.run` (volumes,
                environment, mem_limit, network, ...) for the `image` container.
        """
        super().__init__(**kwargs)
        if (base_url is None) == (image is None):
            raise ValueError("give exactly one of base_url (a running server) or image (a Docker image)")
        self.base_url = base_url.rstrip("/") if base_url else None
        self.image = image
        self.action_field = action_field
        self.observation_field = observation_field
        self.system_prompt = system_prompt
        self.start_timeout_s = start_timeout_s
        self.message_timeout_s = message_timeout_s
        self.docker_options = dict(docker_options or {})
        self.container: Any = None
        self._client: Any = None
        self.last_observation: dict[str, Any] = {}

    # ---- where the server runs ---------------------------------------------------------------
    async def _at_home(self, coro: Any) -> Any:
        return await get_env_loop().hop(coro)  # the WebSocket lives on the runtime's loop

    def _holds_resources(self) -> bool:
        return super()._holds_resources() or self._client is not None or self.container is not None

    async def _connect(self) -> Any:
        if self._client is not None:
            return self._client
        from openenv.core.generic_client import GenericEnvClient

        if self.base_url is None:
            self.base_url = await asyncio.to_thread(self._start_container)
        client = GenericEnvClient(base_url=self.base_url, message_timeout_s=self.message_timeout_s)
        try:
            await client.connect()
        except Exception as e:
            raise OpenEnvError(f"no OpenEnv server answered at {self.base_url}: {e}") from e
        self._client = client
        return client

    def _start_container(self) -> str:
        import docker

        engine = docker.from_env()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.container = engine.containers.run(
            self.image,
            detach=True,
            labels={LABEL: "1"},
            ports={"8000/tcp": ("127.0.0.1", port)},
            **self.docker_options,
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return url
            self.container.reload()
            if self.container.status == "exited":
                logs = self.container.logs(tail=20).decode(errors="replace")
                self._remove_container()
                raise OpenEnvError(f"the OpenEnv container of {self.image} exited while starting:\n{logs}")
            time.sleep(0.2)
        self._remove_container()
        raise OpenEnvError(f"{self.image} did not answer {url}/health within {self.start_timeout_s:.0f}s")

    def _remove_container(self) -> None:
        container, self.container = self.container, None
        if container is not None:
            with contextlib.suppress(Exception):
                container.remove(force=True)

    async def aclose(self) -> None:
        await self._at_home(self._close())

    async def _close(self) -> None:
        self._end_episode()
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
        if self.container is not None:
            self.base_url = None
            await asyncio.to_thread(self._remove_container)

    # ---- the episode ---------------------------------------------------------------------------
    def _message(self, observation: dict[str, Any]) -> str:
        field = self.observation_field
        if field is not None and field in observation:
            return str(observation[field])
        return json.dumps(observation, ensure_ascii=False, sort_keys=True, default=str)

    def _action(self, text: str) -> dict[str, Any]:
        if self.action_field is not None:
            return {self.action_field: text}
        decoder, last, i = json.JSONDecoder(), None, text.find("{")
        while i != -1:  # the last top-level JSON object in the reply
            try:
                obj, end = decoder.raw_decode(text, i)
            except ValueError:
                i = text.find("{", i + 1)
                continue
            if isinstance(obj, dict):
                last = obj
            i = text.find("{", end)
        if last is None:
            raise TaskError("the reply holds no JSON object with the action's fields")
        return last

    async def on_reset(self, task: OpenEnvTask) -> list[dict[str, str]]:
        try:
            result = await (await self._connect()).reset(**task.reset)
        except OpenEnvError:
            raise
        except Exception:  # a session that went away (server restarted, idle timeout): once more
            client, self._client = self._client, None
            with contextlib.suppress(Exception):
                await client.close()
            result = await (await self._connect()).reset(**task.reset)
        self.last_observation = dict(result.observation or {})
        text = self._message(self.last_observation)
        if task.instruction:
            text = f"{task.instruction}\n\n{text}"
        msgs = [{"role": "user", "content": text}]
        if self.system_prompt:
            msgs.insert(0, {"role": "system", "content": self.system_prompt})
        return msgs

    async def on_step(self, action: str) -> Step:
        try:
            payload = self._action(action)
        except TaskError as e:
            return Step(f"Error: {e}.", info={"format_error": True})
        try:
            result = await self._client.step(payload)
        except Exception as e:  # the server refused the action (a schema error): the agent's turn again
            return Step(f"Error: the environment refused the action: {e}", info={"tool_error": str(e)})
        self.last_observation = dict(result.observation or {})
        reward = float(result.reward) if result.reward is not None else 0.0
        return Step(
            self._message(self.last_observation),
            reward=reward,
            terminated=bool(result.done),
            info={"openenv": {"observation": self.last_observation, "reward": result.reward}},
        )

    async def state(self) -> dict[str, Any]:
        """The server's `state` (episode id, step count, whatever the env adds)."""
        client = await self._connect()
        state = await client.state()
        return dict(state or {})


def remove_leftover_containers() -> int:
    """Remove OpenEnv containers that envs of a killed process left behind; how many."""
    import docker

    engine = docker.from_env()
    gone = 0
    for c in engine.containers.list(all=True, filters={"label": LABEL}):
        with contextlib.suppress(Exception):
            c.remove(force=True)
            gone += 1
    return gone
