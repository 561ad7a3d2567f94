"""Async calls on any Gymnasium env: the twin where there is one, a worker thread otherwise.

arborl envs and wrappers have `areset`/`astep`/`aclose`; other envs (or a chain holding a
Gymnasium wrapper without a twin, e.g. `TimeLimit` from `max_episode_steps=`) are stepped
through their sync API in a thread, so the event loop is never blocked.
"""

from __future__ import annotations

import asyncio
from typing import Any

import gymnasium


async def areset(
    env: gymnasium.Env, *, seed: int | None = None, options: dict[str, Any] | None = None
) -> tuple[Any, dict[str, Any]]:
    if hasattr(env, "areset"):
        return await env.areset(seed=seed, options=options)
    return await asyncio.to_thread(env.reset, seed=seed, options=options)


async def astep(env: gymnasium.Env, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
    if hasattr(env, "astep"):
        return await env.astep(action)
    obs, reward, terminated, truncated, info = await asyncio.to_thread(env.step, action)
    return obs, float(reward), terminated, truncated, info


async def aclose(env: gymnasium.Env) -> None:
    if hasattr(env, "aclose"):
        await env.aclose()
    else:
        await asyncio.to_thread(env.close)


async def afinish(env: gymnasium.Env) -> tuple[float, dict[str, Any]]:
    """Score and end a running episode early (the base env's `afinish`); (0, {}) if none."""
    finish = getattr(env.unwrapped, "afinish", None)
    return await finish() if finish is not None else (0.0, {})


async def arelease(env: gymnasium.Env) -> None:
    """Give a finished episode's sandbox back to its pool now, if the env holds one."""
    release = getattr(env.unwrapped, "arelease", None)
    if release is not None:
        await release()
