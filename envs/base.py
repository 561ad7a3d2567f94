"""The arborl env contract: a real `gymnasium.Env`, text in, chat messages out, async twin.

    obs, info = env.reset(options={"task": task})        # or: await env.areset(...)
    obs, reward, terminated, truncated, info = env.step(model_reply_text)

`TextEnv` holds the episode bookkeeping every env shares; subclasses write three hooks:

    async def on_reset(self, task) -> str | messages      # the first messages of the episode
    async def on_step(self, action: str) -> Step          # one model reply → observation, reward, ...
    async def on_finish(self) -> (reward, info)           # a budget ran out: score what is there

`SandboxEnv` adds a sandbox lease for the episode (`self.sandbox`), taken from a pool at
reset and given back when the episode ends, the env closes, or anything fails: a sandbox
error becomes an error observation and a truncated episode, never an exception.

Every step's `info` carries `turn`, `task_id`, `state_hash` (a stable hash of the env
state after the step), `tool_calls` (name, ok, error, duration of each) and `timing`
(`step_s`, `sandbox_s` spent waiting on the sandbox, `overhead_s` the rest). Reset's `info`
carries `state_hash` too: the state the first turn is taken from. The agent records, per
turn, the hash of the state the turn started from (reset's, then the previous step's) as
GiGPO's anchor state, so `state_hash` must depend on the env state only (not on the episode,
the sandbox or the time): two resets on one task must give one hash. A hash that fails is
an error in tests and a counted warning in runs, with `state_hash` "" (unknown) and
`state_hash_error` in the info (`state_hash.py`).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import gymnasium
from gymnasium.envs.registration import EnvSpec
from gymnasium.error import ResetNeeded

from arborl.sandboxes import (
    SandboxCrashed,
    SandboxError,
    SandboxUnresponsive,
)
from arborl.tasks import Task, coerce_task

from .event_loop import get_env_loop
from .spaces import Message, action_space, chat_observation_space, coerce_action, to_messages
from .state_hash import record_failure, stable_hash
from .state_hash import strict as strict_state_hash

log = logging.getLogger(__name__)
T = TypeVar("T")
Observation = tuple[Message, ...]
#: How much of each message the env keeps for `render()` and the default state hash.
TRANSCRIPT_CHARS = 64 * 1024


class _SpecKwargs(dict[str, Any]):
    """Env kwargs whose deep copy shares sandbox handles: a pool or backend holds sockets and
    threads and cannot be copied, and a copy of the spec (Gymnasium makes one for every
    wrapper, and `spec.make()` another) must still reach the same sandboxes."""

    SHARED = ("pool", "backend")

    def __deepcopy__(self, memo: dict[int, Any]) -> _SpecKwargs:
        return _SpecKwargs({k: v if k in self.SHARED else copy.deepcopy(v, memo) for k, v in self.items()})


class TaskError(ValueError):
    """The task given to `reset(options={"task": ...})` is not one this env can run."""


@dataclass
class Step:
    """What `on_step` returns. A str observation becomes one message with `role`."""

    observation: str | Sequence[Mapping[str, Any]]
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    role: str = "user"


def sandbox_failure(e: SandboxError) -> dict[str, Any]:
    """Step info of an episode its sandbox failed: who failed it, and how it was cut.

    `sandbox_fault` "agent" (its commands exhausted or killed the sandbox) is the agent's
    failure: scored 0, trained on, never retried. "infra" is not: evaluation retries it and
    training leaves the episode out (`truncated_by` "sandbox_infra").
    """
    fault = getattr(e, "fault", "infra")
    return {
        "sandbox_error": f"{type(e).__name__}: {e}",
        "sandbox_fault": fault,
        "truncated_by": "sandbox_crash" if fault == "agent" else "sandbox_infra",
    }


class TextEnv(gymnasium.Env[Observation, str]):
    """Base of every arborl env: chat spaces, the async twin, episode bookkeeping."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}  # noqa: RUF012 - Gymnasium declares it so
    #: Tasks are validated into this type (None: passed through as given).
    task_type: ClassVar[type[Task] | None] = None
    #: The task `reset()` runs without `options["task"]` (what `check_env` gets).
    default_task: ClassVar[Any] = None

    def __init__(self, *, render_mode: str | None = None, strict: bool = False) -> None:
        """`strict=True` re-raises unexpected env errors instead of ending the episode."""
        self.observation_space = chat_observation_space()
        self.action_space = action_space()
        self.render_mode = render_mode
        self.strict = strict
        self.task: Any = None
        self.turn = 0
        self._active = False
        self._transcript: list[Message] = []
        self._sandbox_s = 0.0

    @property
    def spec(self) -> EnvSpec | None:
        return self._spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        if value is not None and value.kwargs and not isinstance(value.kwargs, _SpecKwargs):
            value.kwargs = _SpecKwargs(value.kwargs)
        self._spec = value

    _spec: EnvSpec | None = None

    # ---- hooks for subclasses ---------------------------------------------------------
    async def on_reset(self, task: Any) -> str | Sequence[Mapping[str, Any]]:
        """Start an episode of `task`; return its first messages (a str is one user message)."""
        raise NotImplementedError

    async def on_step(self, action: str) -> Step:
        """Apply one model reply."""
        raise NotImplementedError

    async def on_finish(self) -> tuple[float, dict[str, Any]]:
        """The episode is cut short by a budget: score the current state (default 0)."""
        return 0.0, {}

    async def state_hash(self) -> str:
        """A stable hash of the env state; default: of the conversation so far."""
        return stable_hash([self.task_id, self._transcript])

    def reset_info(self) -> dict[str, Any]:
        """Extra `info` at reset (fresh objects each call), e.g. the tool list."""
        return {}

    async def make_observation(self, messages: Observation) -> Any:
        """What `reset`/`step` return, given the step's chat messages.

        Text envs return the messages themselves. Envs that see pixels override this (and
        `observation_space`) to return e.g. ``{"messages": messages, "screenshot": array}``;
        the messages stay what a chat model reads, under the ``"messages"`` key
        (`arborl.envs.spaces.observation_messages` gets them back from either form). It must not
        raise, also after a sandbox failure: return a placeholder (a blank screen) instead.
        """
        return messages

    # ---- the sync API (gymnasium) -----------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        return get_env_loop().run(self.areset(seed=seed, options=options))

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        return get_env_loop().run(self.astep(action))

    def close(self) -> None:
        if self._holds_resources():
            try:
                get_env_loop().run(self.aclose(), timeout=60.0)
            except RuntimeError as e:  # env event loop already stopped (interpreter exit)
                log.debug("close after event loop shutdown: %s", e)

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{m['role']}] {m['content']}" for m in self._transcript)

    # ---- the async twin ---------------------------------------------------------------
    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        gymnasium.Env.reset(self, seed=seed)  # seeds self.np_random
        return await self._at_home(self._reset(dict(options or {})))

    async def astep(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        return await self._at_home(self._step(action))

    async def afinish(self) -> tuple[float, dict[str, Any]]:
        """End a running episode early (a wrapper's budget ran out): score it, free it."""
        return await self._at_home(self._finish())

    async def aclose(self) -> None:
        self._end_episode()

    @property
    def active(self) -> bool:
        """Whether an episode is running (reset done, not yet ended)."""
        return self._active

    @property
    def task_id(self) -> str:
        task = self.task
        if isinstance(task, Task):
            return task.id
        if isinstance(task, Mapping):
            return str(task.get("id", ""))
        return ""

    # ---- internals --------------------------------------------------------------------
    async def _at_home(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` where this env's resources live (here: the caller's loop)."""
        return await coro

    def _holds_resources(self) -> bool:
        return self._active

    def _end_episode(self, broken: bool = False) -> None:
        """Mark the episode over and give back what it held (synchronously)."""
        self._active = False

    async def _before_reset(self, task: Any) -> None:
        """Get what the episode needs before `on_reset` (SandboxEnv: the lease)."""

    def _coerce_task(self, task: Any) -> Any:
        if task is None:
            task = self.default_task
        if task is None:
            raise TaskError(f"{type(self).__name__} needs a task: reset(options={{'task': ...}})")
        if self.task_type is None:
            return task
        try:
            return coerce_task(task, self.task_type)
        except ValueError as e:
            raise TaskError(f"not a valid {self.task_type.__name__}: {e}") from e

    async def _reset(self, options: dict[str, Any]) -> tuple[Observation, dict[str, Any]]:
        start = time.perf_counter()
        task = self._coerce_task(options.get("task"))
        self._end_episode()
        self.task, self.turn, self._sandbox_s = task, 0, 0.0
        try:
            await self._before_reset(task)
            msgs = to_messages(await self.on_reset(task), role="user")
        except BaseException:
            self._end_episode()
            raise
        self._transcript = [self._kept(m) for m in msgs]
        self._active = True
        info = {
            "task_id": self.task_id,
            "turn": 0,
            **await self._hash_info(),
            **self.reset_info(),
        }
        obs = await self.make_observation(msgs)
        info["timing"] = self._timing(start)
        return obs, info

    async def _step(self, action: Any) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if not self._active:
            raise ResetNeeded("call reset() before step(): no episode is running (or it has ended)")
        start = time.perf_counter()
        self._sandbox_s = 0.0
        text = coerce_action(action)
        broken = False
        try:
            step = await self.on_step(text)
        except BaseException as e:
            if not isinstance(e, Exception) or self.strict:
                self._end_episode()
                raise
            broken = isinstance(e, SandboxCrashed | SandboxUnresponsive) or getattr(e, "fatal", False)
            step = self._failed_step(e)
        self.turn += 1
        msgs = to_messages(step.observation, role=step.role)
        self._transcript.append(self._kept({"role": "assistant", "content": text}))
        self._transcript.extend(self._kept(m) for m in msgs)
        info: dict[str, Any] = {"task_id": self.task_id, "turn": self.turn, "tool_calls": [], **step.info}
        info.update({"state_hash": ""} if broken else await self._hash_info())
        if step.terminated or step.truncated:
            self._end_episode(broken=broken)
        obs = await self.make_observation(msgs)
        info["timing"] = self._timing(start)
        return obs, float(step.reward), bool(step.terminated), bool(step.truncated), info

    def _failed_step(self, e: Exception) -> Step:
        if isinstance(e, SandboxError):
            log.warning("%s: sandbox failed mid-episode: %s", type(self).__name__, e)
            return Step(
                f"Error: the sandbox failed ({type(e).__name__}: {e}). The episode has ended.",
                truncated=True,
                info=sandbox_failure(e),
            )
        log.exception("%s: env error mid-episode", type(self).__name__)
        return Step(
            f"Error: the environment failed internally ({type(e).__name__}). The episode has ended.",
            truncated=True,
            info={"env_error": f"{type(e).__name__}: {e}"},
        )

    async def _finish(self) -> tuple[float, dict[str, Any]]:
        if not self._active:
            return 0.0, {}
        try:
            reward, info = await self.on_finish()
        except Exception as e:
            if self.strict:
                raise
            log.warning("%s: scoring at budget end failed: %s", type(self).__name__, e)
            reward, info = 0.0, {"finish_error": f"{type(e).__name__}: {e}"}
            if isinstance(e, SandboxError):
                info.update(sandbox_failure(e))
        finally:
            self._end_episode()
        return float(reward), dict(info)

    async def _hash_info(self) -> dict[str, str]:
        """`state_hash`, or, if it failed, "" and `state_hash_error`: raised under `strict` or
        in tests (`ARBORL_STRICT_STATE_HASH`), else counted (`state_hash.record_failure`).
        A sandbox that fails under the hash is the step's infrastructure failure, not a bug
        of the hash: only `strict` raises it."""
        try:
            return {"state_hash": await self.state_hash()}
        except Exception as e:
            if self.strict or (strict_state_hash() and not isinstance(e, SandboxError)):
                self._end_episode()
                raise
            record_failure(type(self).__name__, e)
            return {"state_hash": "", "state_hash_error": f"{type(e).__name__}: {e}"[:500]}

    def _timing(self, start: float) -> dict[str, float]:
        total = time.perf_counter() - start
        return {
            "step_s": total,
            "sandbox_s": self._sandbox_s,
            "overhead_s": max(0.0, total - self._sandbox_s),
        }

    @staticmethod
    def _kept(m: Message) -> Message:
        return {"role": m["role"], "content": m["content"][:TRANSCRIPT_CHARS]}
