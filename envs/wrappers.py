"""Wrappers, one concern each, with the async twin (sync calls run the async path).

    env = TurnLimit(TokenBudget(FormatPenalty(gymnasium.make("arborl/Code-v0"), 0.1), 32_000), 30)

- `TurnLimit(env, max_turns)`        truncate after `max_turns` steps
- `TokenBudget(env, max_tokens)`     truncate once the replies (and optionally observations) use the budget
- `TruncateObservation(env, n)`      cut each message to `n` characters, head + tail around a marker
- `FormatPenalty(env, penalty)`      subtract `penalty` when the reply broke the tool-call format
- `StepTimeout(env, seconds)`        a step that takes longer is cancelled; the episode ends truncated

The budget wrappers end the episode through the base env's `afinish`, which scores what is
there (the code env runs its verifier) and frees the sandbox; that reward is added to the
truncating step's reward and its info merged in, with `info["truncated_by"]` saying why.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import gymnasium

from .aio import aclose, afinish, areset, astep
from .event_loop import get_env_loop
from .toolbox import head_tail

T = TypeVar("T")
StepResult = tuple[Any, float, bool, bool, dict[str, Any]]


class AsyncWrapper(gymnasium.Wrapper, gymnasium.utils.RecordConstructorArgs):
    """A Gymnasium wrapper whose sync API runs its async twin on the env event loop.

    Subclasses call `super().__init__(env, **their_args)`: the args are recorded in the
    env's spec (`RecordConstructorArgs`), so `gymnasium.make(env.spec)` rebuilds the stack.
    """

    def __init__(self, env: gymnasium.Env, **recorded: Any) -> None:
        gymnasium.utils.RecordConstructorArgs.__init__(self, **recorded)
        gymnasium.Wrapper.__init__(self, env)

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        return get_env_loop().run(coro)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        return self._sync(self.areset(seed=seed, options=options))

    def step(self, action: Any) -> StepResult:
        return self._sync(self.astep(action))

    def close(self) -> None:
        self.env.close()

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict]:
        return await areset(self.env, seed=seed, options=options)

    async def astep(self, action: Any) -> StepResult:
        return await astep(self.env, action)

    async def aclose(self) -> None:
        await aclose(self.env)

    async def _truncate(self, result: StepResult, why: str) -> StepResult:
        """End the episode now: score it through the base env and mark the step truncated."""
        obs, reward, terminated, truncated, info = result
        if terminated or truncated:
            return result
        bonus, extra = await afinish(self.env)
        return obs, reward + bonus, False, True, {**info, **extra, "truncated_by": why}


class TurnLimit(AsyncWrapper):
    """Truncate the episode after `max_turns` steps."""

    def __init__(self, env: gymnasium.Env, max_turns: int) -> None:
        super().__init__(env, max_turns=max_turns)
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.max_turns = max_turns
        self.turns = 0

    async def areset(self, **kwargs: Any) -> tuple[Any, dict]:
        self.turns = 0
        return await super().areset(**kwargs)

    async def astep(self, action: Any) -> StepResult:
        result = await super().astep(action)
        self.turns += 1
        if self.turns >= self.max_turns:
            result = await self._truncate(result, "turn_limit")
        return result


def approx_tokens(text: str) -> int:
    """About 4 characters per token: the default when no tokenizer is given."""
    return math.ceil(len(text) / 4)


class TokenBudget(AsyncWrapper):
    """Truncate once the episode's tokens reach `max_tokens`.

    Counts the model's replies, and the observations too with `count_observations=True`.
    `count_tokens` is e.g. `lambda s: len(tokenizer.encode(s))`; default ~4 chars/token.
    `info["tokens_used"]` reports the running total.
    """

    def __init__(
        self,
        env: gymnasium.Env,
        max_tokens: int,
        count_tokens: Callable[[str], int] = approx_tokens,
        count_observations: bool = False,
    ) -> None:
        super().__init__(
            env, max_tokens=max_tokens, count_tokens=count_tokens, count_observations=count_observations
        )
        self.max_tokens = max_tokens
        self.count_tokens = count_tokens
        self.count_observations = count_observations
        self.used = 0

    def _count_obs(self, obs: Any) -> int:
        if not self.count_observations:
            return 0
        return sum(self.count_tokens(m["content"]) for m in obs) if isinstance(obs, tuple) else 0

    async def areset(self, **kwargs: Any) -> tuple[Any, dict]:
        obs, info = await super().areset(**kwargs)
        self.used = self._count_obs(obs)
        return obs, {**info, "tokens_used": self.used}

    async def astep(self, action: Any) -> StepResult:
        self.used += self.count_tokens(action if isinstance(action, str) else str(action))
        obs, reward, terminated, truncated, info = await super().astep(action)
        self.used += self._count_obs(obs)
        result = (obs, reward, terminated, truncated, {**info, "tokens_used": self.used})
        if self.used >= self.max_tokens:
            result = await self._truncate(result, "token_budget")
        return result


class TruncateObservation(AsyncWrapper):
    """Cut every message's content to `max_chars`, keeping head and tail around a marker."""

    def __init__(self, env: gymnasium.Env, max_chars: int = 16_000) -> None:
        super().__init__(env, max_chars=max_chars)
        self.max_chars = max_chars

    def _cut(self, obs: Any) -> Any:
        if not isinstance(obs, tuple):
            return obs
        return tuple({**m, "content": head_tail(m["content"], self.max_chars)} for m in obs)

    async def areset(self, **kwargs: Any) -> tuple[Any, dict]:
        obs, info = await super().areset(**kwargs)
        return self._cut(obs), info

    async def astep(self, action: Any) -> StepResult:
        obs, reward, terminated, truncated, info = await super().astep(action)
        return self._cut(obs), reward, terminated, truncated, info


class FormatPenalty(AsyncWrapper):
    """Subtract `penalty` from the reward of a step whose reply broke the tool-call format."""

    def __init__(self, env: gymnasium.Env, penalty: float = 0.1) -> None:
        super().__init__(env, penalty=penalty)
        self.penalty = penalty

    async def astep(self, action: Any) -> StepResult:
        obs, reward, terminated, truncated, info = await super().astep(action)
        if info.get("format_error"):
            reward -= self.penalty
            info = {**info, "format_penalty": self.penalty}
        return obs, reward, terminated, truncated, info


class StepTimeout(AsyncWrapper):
    """A step taking longer than `timeout_s` is cancelled and ends the episode (truncated).

    Cancelling the env's step gives its sandbox back to be reset (which kills whatever the
    step left running), so the next `reset` starts clean.
    """

    def __init__(self, env: gymnasium.Env, timeout_s: float) -> None:
        super().__init__(env, timeout_s=timeout_s)
        self.timeout_s = timeout_s

    async def astep(self, action: Any) -> StepResult:
        try:
            return await asyncio.wait_for(super().astep(action), self.timeout_s)
        except TimeoutError:
            message = f"Error: the step took longer than {self.timeout_s:g}s and was stopped. The episode has ended."
            info = {
                "tool_calls": [],
                "state_hash": "",
                "step_timeout": True,
                "truncated_by": "step_timeout",
                "timing": {"step_s": self.timeout_s, "sandbox_s": 0.0, "overhead_s": 0.0},
            }
            return ({"role": "user", "content": message},), 0.0, False, True, info
