"""A Prime Intellect `verifiers` environment played as an arborl env, without verifiers' trainer.

    register_verifiers_environment("vf-guess", env_args={"n": 4})   # id verifiers/vf-guess-v0, suite vf-guess
    env = gymnasium.make("verifiers/vf-guess-v0")
    obs, info = env.reset(options={"task": get_suite("vf-guess").tasks()[0]})
    obs, reward, terminated, truncated, info = env.step(reply)

The verifiers environment's own `rollout` runs each episode, unchanged, as a task on the env's
event loop: its stop conditions, its `env_response` (a `MultiTurnEnv`'s feedback, a `ToolEnv`'s
tool calls), its state. Where it would ask a model for the next message, it asks a client that
hands the prompt to arborl and waits for `step(reply)`:

    reset → rollout(row) ... client.get_response(prompt) ──▶ obs: the prompt's messages
    step(reply) → the reply as the model's Response ──▶ env_response ... get_response(prompt')
                                                      ──▶ obs: what prompt' added after the reply
    ... the rollout ends (a stop condition) → its Rubric.score_rollout → reward, terminated

A reply's tool calls are read by an arborl parser (`parser=`, hermes by default) into the
response's `tool_calls`, as an OpenAI-compatible server would have. The reward comes once, at the
end: the rubric's weighted sum (`info["verifiers"]` also has its metrics and stop condition).
An episode cut by verifiers' own limits (`max_turns`, `timeout_seconds`, a prompt too long) is
`truncated`, and still scored by the rubric, as verifiers scores it; one cut by arborl (a wrapper's
budget, the runner's `max_turns`) is scored by the rubric on what the rollout has so far.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from arborl.tasks import Suite, register_suite
from arborl.tasks.prime_verifiers import VerifiersTask, load_verifiers_environment, verifiers_tasks

from .base import Step, TextEnv
from .parsers import ToolCallParser, get_parser
from .registration import register_env

#: verifiers' stop conditions that cut an episode short (gymnasium's `truncated`); any other
#: (the env's own end: an answer, no tool called, a final env response) is `terminated`.
TRUNCATING_STOPS = frozenset(
    {
        "max_turns_reached",
        "timeout_reached",
        "prompt_too_long",
        "max_total_completion_tokens_reached",
        "has_error",
    }
)
#: The model name verifiers records for arborl's agent.
AGENT_MODEL = "arborl-agent"


class VerifiersEnv(TextEnv):
    """A verifiers environment's rollouts, stepped by arborl (its rubric's reward at the end)."""

    task_type: ClassVar[type[VerifiersTask]] = VerifiersTask

    def __init__(
        self,
        environment: str,
        env_args: Mapping[str, Any] | None = None,
        *,
        parser: str | ToolCallParser = "hermes",
        **kwargs: Any,
    ) -> None:
        """`environment`: the verifiers environment's module name (as `verifiers.load_environment`
        takes it); `env_args`: its `load_environment` arguments."""
        super().__init__(**kwargs)
        self.environment_name = environment
        self.env_args = dict(env_args or {})
        self.vf_env = load_verifiers_environment(environment, self.env_args)
        self.parser = get_parser(parser)
        self._rollout: asyncio.Task[Any] | None = None
        self._asked: asyncio.Future[tuple[list[Any], list[Any] | None]] | None = None
        self._reply: asyncio.Future[Any] | None = None
        self._seen = 0
        self._tools: list[Any] = []
        self._state: Any = None

    @functools.cached_property
    def default_task(self) -> VerifiersTask:
        """The dataset's first row (what `check_env` plays)."""
        return verifiers_tasks(self.environment_name, self.env_args, limit=1)[0]

    # ---- the episode -----------------------------------------------------------------------
    async def on_reset(self, task: VerifiersTask) -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        self._asked, self._seen, self._state = loop.create_future(), 0, None
        client = _channel_client()(self)
        self._rollout = loop.create_task(self._play(task.row, client))
        prompt = await self._next_prompt()
        if prompt is None:  # the rollout ended before asking the model anything
            raise RuntimeError(f"the verifiers rollout of {task.id} ended before its first model turn")
        return self._new_messages(prompt)

    async def on_step(self, action: str) -> Step:
        assert self._reply is not None, "the verifiers rollout is not waiting for a reply"
        response, counts = self._response(action)
        self._asked = asyncio.get_running_loop().create_future()
        self._reply.set_result(response)
        self._seen += 1  # the reply, which the next prompt repeats
        prompt = await self._next_prompt()
        info: dict[str, Any] = dict(counts)
        if prompt is not None:
            return Step(self._new_messages(prompt), info=info)
        state = self._rollout.result() if self._rollout else {}
        stop = state.get("stop_condition")
        info["verifiers"] = {
            "reward": state.get("reward"),
            "metrics": state.get("metrics"),
            "stop_condition": stop,
        }
        if state.get("error") is not None:
            info["env_error"] = f"{type(state['error']).__name__}: {state['error']}"
        final = [_plain(m) for m in state.get("final_env_response") or []]
        # A single-turn env's one turn is its protocol, not a budget: its end is a termination.
        cut = stop in TRUNCATING_STOPS and not (stop == "max_turns_reached" and self.vf_env.max_turns == 1)
        return Step(
            final or "The episode is over.",
            reward=float(state.get("reward") or 0.0),
            terminated=not cut,
            truncated=cut,
            info=info,
        )

    async def on_finish(self) -> tuple[float, dict[str, Any]]:
        """arborl's budget ran out mid-rollout: stop it (its cleanup renders the completion so
        far) and score that with the rubric."""
        rollout, self._rollout = self._rollout, None
        if rollout is None:
            return 0.0, {}
        rollout.cancel()
        await asyncio.gather(rollout, return_exceptions=True)
        state = self._state
        if state is None:
            return 0.0, {}
        await self.vf_env.rubric.score_rollout(state)
        return float(state.get("reward") or 0.0), {
            "verifiers": {"reward": state.get("reward"), "metrics": state.get("metrics")}
        }

    def reset_info(self) -> dict[str, Any]:
        tools = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }
            for t in self._tools
        ]
        return {"tools": tools, "parser": self.parser.name} if tools else {}

    def _end_episode(self, broken: bool = False) -> None:
        if self._rollout is not None and not self._rollout.done():
            self._rollout.cancel()  # verifiers' cleanup handlers run as it unwinds
        self._rollout = None
        super()._end_episode(broken)

    # ---- the bridge --------------------------------------------------------------------------
    async def _play(self, row: dict[str, Any], client: Any) -> Any:
        """verifiers' own rollout of `row`, then its rubric's score (as its `run_rollout` does)."""
        state = await self.vf_env.rollout(row, client, AGENT_MODEL, {})
        if self.vf_env.score_rollouts:
            await self.vf_env.rubric.score_rollout(state)
        await self.vf_env.rubric.cleanup(state)
        return state

    async def ask(self, prompt: list[Any], tools: list[Any] | None, state: Any) -> Any:
        """The client's side: hand the prompt to arborl, wait for the agent's reply."""
        self._state = state  # the rollout's state, which on_finish scores when arborl cuts it
        self._reply = asyncio.get_running_loop().create_future()
        assert self._asked is not None
        self._asked.set_result((prompt, tools))
        return await self._reply

    async def _next_prompt(self) -> list[Any] | None:
        """The next prompt verifiers asks the model about, or None when the rollout ended."""
        assert self._rollout is not None and self._asked is not None
        await asyncio.wait({self._rollout, self._asked}, return_when=asyncio.FIRST_COMPLETED)
        if not self._asked.done():
            self._rollout.result()  # raises what the rollout raised
            return None
        prompt, tools = self._asked.result()
        self._tools = list(tools or [])
        return prompt

    def _new_messages(self, prompt: Sequence[Any]) -> list[dict[str, Any]]:
        """What `prompt` adds to the chat the agent has seen (arborl's chats only append)."""
        if len(prompt) < self._seen:
            raise RuntimeError(
                f"verifiers environment {self.environment_name!r} rewrote the conversation "
                "(get_prompt_messages); arborl's envs only append to it"
            )
        new = [_plain(m) for m in prompt[self._seen :]]
        self._seen = len(prompt)
        return new

    def _response(self, action: str) -> tuple[Any, dict[str, int]]:
        """The agent's reply as the verifiers Response a chat-completions client would return."""
        from verifiers.types import Response, ResponseMessage, ToolCall

        calls = []
        content, errors = action, 0
        if self._tools:
            parsed = self.parser.parse(action, {t.name: t.parameters for t in self._tools})
            errors = len(parsed.errors)
            calls = [
                ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=c.name, arguments=json.dumps(c.arguments))
                for c in parsed.calls
            ]
            content = parsed.content if calls else action
        message = ResponseMessage(
            content=content,
            tool_calls=calls or None,
            finish_reason="tool_calls" if calls else "stop",
            is_truncated=False,
        )
        response = Response(
            id=f"arborl-{uuid.uuid4().hex[:12]}", created=int(time.time()), model=AGENT_MODEL, message=message
        )
        return response, {"n_tool_calls": len(calls), "parse_errors": errors}


def _plain(message: Any) -> dict[str, Any]:
    """A verifiers message as arborl's chat dict: role and text (parts joined, images named)."""
    role = getattr(message, "role", None) or message["role"]
    content = (
        getattr(message, "content", None) if not isinstance(message, Mapping) else message.get("content")
    )
    if isinstance(content, list):
        content = "\n".join(
            str(_get(part, "text")) if _get(part, "type") == "text" else f"[{_get(part, 'type')}]"
            for part in content
        )
    return {"role": str(role), "content": "" if content is None else str(content)}


def _get(part: Any, key: str) -> Any:
    return part.get(key) if isinstance(part, Mapping) else getattr(part, key, None)


@functools.cache
def _channel_client() -> type:
    """A verifiers `Client` whose model is arborl's agent (built on first use: verifiers is
    imported only when a verifiers env is made)."""
    from verifiers.clients.client import Client

    class ArborlAgentClient(Client):
        def __init__(self, env: VerifiersEnv) -> None:
            super().__init__(None)
            self.env = env

        async def get_response(
            self, prompt: Any, model: str, sampling_args: Any, tools: Any = None, **kwargs: Any
        ) -> Any:
            return await self.env.ask(list(prompt), tools, kwargs.get("state"))

        # The rest of the Client contract talks to a provider's API, which this client has none of.
        def setup_client(self, config: Any) -> Any:
            raise NotImplementedError

        async def to_native_tool(self, tool: Any) -> Any:
            raise NotImplementedError

        async def to_native_prompt(self, messages: Any) -> Any:
            raise NotImplementedError

        async def get_native_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        async def raise_from_native_response(self, response: Any) -> None:
            raise NotImplementedError

        async def from_native_response(self, response: Any) -> Any:
            raise NotImplementedError

        async def close(self) -> None:
            return None

    return ArborlAgentClient


def register_verifiers_environment(
    environment: str,
    *,
    env_args: Mapping[str, Any] | None = None,
    env_id: str | None = None,
    suite: str | None = None,
    split: str = "eval",
    limit: int | None = None,
    parser: str = "hermes",
    gold: Callable[..., Any] | str | None = None,
    empty: Callable[..., Any] | str | None = None,
    max_turns: int = 50,
) -> Suite:
    """Register a verifiers environment as an env id (default `verifiers/<environment>-v0`) and
    a suite of its dataset rows (default named `environment`), env-graded by its rubric. Nothing
    is imported until the suite's tasks or the env are used. `gold`/`empty`: scripted policies
    for suite validation, if you have them (verifiers environments ship none)."""
    env_id = env_id or f"verifiers/{environment}-v0"
    name = suite or environment
    register_env(
        env_id,
        VerifiersEnv,
        kwargs={"environment": environment, "env_args": dict(env_args or {}), "parser": parser},
    )
    return register_suite(
        Suite(
            name,
            env_id,
            loader=functools.partial(
                verifiers_tasks, environment, dict(env_args or {}), split=split, limit=limit, prefix=name
            ),
            description=f"the verifiers environment {environment} ({split} rows), scored by its rubric",
            gold=gold,
            empty=empty,
            max_turns=max_turns,
            tags=("verifiers",),
        )
    )


__all__ = ["VerifiersEnv", "register_verifiers_environment"]
