"""Registering envs with Gymnasium under versioned ids, lazily (`"module:Class"`).

    register_env("myorg/WordCount-v0", WordCountEnv)      # or "mypkg.envs:WordCountEnv"
    env = gymnasium.make("myorg/WordCount-v0", backend=my_backend)

`register_env` is `gymnasium.register` with arborl's defaults, and it records the id so the
test suite runs Gymnasium's `check_env` over every arborl env, built-in or user-made:

- `nondeterministic=True`: sandboxed envs depend on wall time (timeouts) and report
  per-step timing in `info`, so seeded runs match in observations but not in `info`.
- `order_enforce=False`, `disable_env_checker=True`: `gymnasium.make` returns the env
  itself, with its async twin reachable (`env.astep`); arborl envs enforce reset-before-step
  themselves, and `check_env` runs in CI for every registered id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium

from .benchmarks import Benchmark, register_benchmark

#: Every id registered through arborl, in order (what the `check_env` test iterates).
ARBORL_ENV_IDS: list[str] = []

BUILTIN_ENVS = {
    "arborl/Code-v0": "arborl.envs.code.env:CodeEnv",
    "arborl/Tool-v0": "arborl.envs.function_calling.env:ToolEnv",
    "arborl/Desktop-v0": "arborl.envs.desktop.env:DesktopEnv",
    "arborl/Web-v0": "arborl.envs.web.env:WebEnv",
    "arborl/MiniWoB-v0": "arborl.envs.web.miniwob:MiniWoBEnv",
    "arborl/Sokoban-v0": "arborl.envs.sokoban.env:SokobanEnv",
    "arborl/SokobanChat-v0": "arborl.envs.sokoban.env:SokobanChatEnv",
    "arborl/BFCL-v0": "arborl.envs.bfcl.env:BfclEnv",
    "arborl/TextWorld-v0": "arborl.envs.textworld.env:TextWorldEnv",
    "arborl/ScienceWorld-v0": "arborl.envs.scienceworld.env:ScienceWorldEnv",
}


#: The envs whose suites `arborl eval` grades its own way (`arborl.envs.benchmarks`); the
#: others' episodes are graded by the env (its reward) and the suite's success rule.
BUILTIN_BENCHMARKS = {
    "arborl/Code-v0": "arborl.envs.code.swe_grading:SWEBench",
    "arborl/BFCL-v0": "arborl.envs.bfcl.eval_hook:BfclBenchmark",
    "arborl/Desktop-v0": "arborl.envs.desktop.support:OSWorldBenchmark",
}


def register_env(
    env_id: str,
    entry_point: str | Callable[..., gymnasium.Env],
    *,
    force: bool = False,
    benchmark: Benchmark | str | None = None,
    **kwargs: Any,
) -> None:
    """Register an env class (or `"module:Class"` path) under `env_id` ("namespace/Name-vN").

    `kwargs` go to `gymnasium.register` (e.g. `kwargs={...}` defaults for the constructor,
    `max_episode_steps`); re-registering an id is an error unless `force=True`. `benchmark`:
    how `arborl eval` grades this env's suites when not by the env's reward (a
    `arborl.envs.benchmarks.Benchmark`, or the `"module:attribute"` naming one).
    """
    if env_id in gymnasium.registry and not force:
        same = env_id in ARBORL_ENV_IDS and _name(gymnasium.registry[env_id].entry_point) == _name(
            entry_point
        )
        if not same:
            raise ValueError(f"{env_id} is already registered; pick a new version (-v1) or pass force=True")
        del gymnasium.registry[env_id]  # the same env registered again (a re-import, a re-run cell)
    options: dict[str, Any] = {"nondeterministic": True, "order_enforce": False, "disable_env_checker": True}
    options.update(kwargs)
    gymnasium.register(id=env_id, entry_point=entry_point, **options)
    if benchmark is not None:
        register_benchmark(env_id, benchmark, force=force)
    if env_id not in ARBORL_ENV_IDS:
        ARBORL_ENV_IDS.append(env_id)


def _name(entry_point: Any) -> str:
    if isinstance(entry_point, str):
        return entry_point
    return (
        f"{getattr(entry_point, '__module__', '')}:{getattr(entry_point, '__qualname__', repr(entry_point))}"
    )


def registered_ids() -> list[str]:
    """The ids registered through arborl (built-in first)."""
    return list(ARBORL_ENV_IDS)


def register_builtin_envs() -> None:
    for env_id, entry_point in BUILTIN_ENVS.items():
        register_env(env_id, entry_point, benchmark=BUILTIN_BENCHMARKS.get(env_id))
