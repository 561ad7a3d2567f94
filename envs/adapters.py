"""Adapters: envs written to the 4-tuple convention become arborl Gymnasium envs.

rLLM (`BaseEnv`), OSWorld (`DesktopEnv`) and R2E-Gym (`RepoEnv`) envs step as
`obs, reward, done, info = env.step(action)` and reset as `obs` or `(obs, info)`; their
methods may be sync or async. `FourTupleAdapter` gives them the arborl contract: text
action, chat-message observations, `terminated` kept apart from `truncated`, the async twin.

    done and info["TimeLimit.truncated"] (or info["truncated"])  →  truncated
    done otherwise                                               →  terminated

The task of `reset(options={"task": task})` reaches the inner env either through
`env_factory(task)` (a new inner env per task: rLLM's `Env.from_dict`, R2E-Gym's
`RepoEnv(ds)`) or as a keyword of its `reset` (`reset_task_kwarg="task_config"` for OSWorld).
Sync inner methods run in a worker thread, so a slow env never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from arborl.tasks.common import load_entry_point

from .base import Step, TextEnv


def _resolve(ref: str | Callable[..., Any]) -> Callable[..., Any]:
    return load_entry_point(ref) if isinstance(ref, str) else ref  # type: ignore[no-any-return]


async def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    result = await asyncio.to_thread(fn, *args, **kwargs)
    return await result if inspect.isawaitable(result) else result


def default_obs_to_text(obs: Any) -> str | Sequence[Mapping[str, Any]]:
    """str as is; a chat message or a list of them as is; anything else as JSON."""
    if isinstance(obs, str):
        return obs
    if isinstance(obs, Mapping) and "content" in obs:
        return [obs]
    if isinstance(obs, list | tuple) and all(isinstance(m, Mapping) and "content" in m for m in obs):
        return list(obs)
    return json.dumps(obs, default=str, ensure_ascii=False)


class FourTupleAdapter(TextEnv):
    """An arborl env over an env with `step(action) -> (obs, reward, done, info)`."""

    def __init__(
        self,
        env: Any = None,
        *,
        env_factory: str | Callable[[Any], Any] | None = None,
        reset_task_kwarg: str | None = None,
        obs_to_text: Callable[[Any], str | Sequence[Mapping[str, Any]]] = default_obs_to_text,
        action_from_text: Callable[[str], Any] | None = None,
        default_task: Any = None,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            env: the inner env (used for every task unless `env_factory` is given).
            env_factory: `task -> inner env` (or `"module:callable"`), called at each reset
                with a task; the previous inner env is closed.
            reset_task_kwarg: pass the task to `inner.reset(**{reset_task_kwarg: task})`.
            obs_to_text: inner observation → str or chat messages.
            action_from_text: model text → the inner env's action (default: the text).
            default_task: the task of a reset without one (what `check_env` uses).
        """
        super().__init__(**kwargs)
        if env is None and env_factory is None:
            raise ValueError("FourTupleAdapter needs an inner `env` or an `env_factory`")
        self.inner = env
        self.env_factory = _resolve(env_factory) if env_factory is not None else None
        self.reset_task_kwarg = reset_task_kwarg
        self.obs_to_text = obs_to_text
        self.action_from_text = action_from_text
        self._default_task = default_task

    def _coerce_task(self, task: Any) -> Any:
        return task if task is not None else self._default_task

    async def on_reset(self, task: Any) -> str | Sequence[Mapping[str, Any]]:
        if self.env_factory is not None and (task is not None or self.inner is None):
            old, self.inner = self.inner, await _call(self.env_factory, task)
            if old is not None and old is not self.inner and hasattr(old, "close"):
                await _call(old.close)
        kwargs = {self.reset_task_kwarg: task} if self.reset_task_kwarg and task is not None else {}
        out = await _call(self.inner.reset, **kwargs)
        obs = out[0] if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict) else out
        return self.obs_to_text(obs)

    async def on_step(self, action: str) -> Step:
        inner_action = self.action_from_text(action) if self.action_from_text else action
        out = await _call(self.inner.step, inner_action)
        if len(out) == 5:  # already Gymnasium-style
            obs, reward, terminated, truncated, info = out
        else:
            obs, reward, done, info = out
            info = dict(info or {})
            cut = bool(info.pop("TimeLimit.truncated", False) or info.get("truncated", False))
            terminated, truncated = bool(done) and not cut, bool(done) and cut
        return Step(
            self.obs_to_text(obs),
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            info={"inner_info": _jsonable(info)},
        )

    async def aclose(self) -> None:
        await super().aclose()
        if self.inner is not None and hasattr(self.inner, "close"):
            await _call(self.inner.close)

    def close(self) -> None:
        if self.inner is not None and hasattr(self.inner, "close"):
            from .event_loop import get_env_loop

            get_env_loop().run(self.aclose())


def _jsonable(info: Any) -> Any:
    """A fresh, plain copy of the inner info (Gymnasium wants new objects each step)."""
    try:
        return json.loads(json.dumps(info, default=str))
    except (TypeError, ValueError):
        return str(info)
