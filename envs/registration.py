"""Registering envs with Gymnasium under versioned ids, lazily (`"module:Class"`).

    register_env("myorg/WordCount-v0", WordCountEnv)      # or "mypkg.envs:WordCountEnv"
    env = gymnasium.make("myorg/WordCount-v0", backend=my_backend)

`register_env` is `gymnasium.register` with arborl's defaults, and it records the id (and
what registered it: built in, an installed package, a user's module) so the test suite runs
Gymnasium's `check_env` over every arborl env, built-in or user-made, and `arborl envs list`
says where each came from:

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
from gymnasium.envs.registration import EnvSpec

from arborl.tasks.env_packages import BUILT_IN, load_env_packages, note_registered, registering_as

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
    "arborl/Harbor-v0": "arborl.envs.harbor.env:HarborEnv",
}


#: The envs whose suites `arborl eval` grades its own way (`arborl.envs.benchmarks`); the
#: others' episodes are graded by the env (its reward) and the suite's success rule.
BUILTIN_BENCHMARKS = {
    "arborl/Code-v0": "arborl.envs.code.swe_grading:SWEBench",
    "arborl/BFCL-v0": "arborl.envs.bfcl.eval_hook:BfclBenchmark",
    "arborl/Desktop-v0": "arborl.envs.desktop.support:OSWorldBenchmark",
    "arborl/Harbor-v0": "arborl.envs.harbor.benchmark:HarborBenchmark",
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
    replaced = env_id in gymnasium.registry and _name(gymnasium.registry[env_id].entry_point) != _name(
        entry_point
    )
    options: dict[str, Any] = {"nondeterministic": True, "order_enforce": False, "disable_env_checker": True}
    options.update(kwargs)
    gymnasium.register(id=env_id, entry_point=entry_point, **options)
    if benchmark is not None:
        register_benchmark(env_id, benchmark, force=force)
    note_registered("env", env_id, replaced=replaced)
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
    with registering_as(BUILT_IN):
        for env_id, entry_point in BUILTIN_ENVS.items():
            register_env(env_id, entry_point, benchmark=BUILTIN_BENCHMARKS.get(env_id))


def find_installed_packages_on_lookup() -> None:
    """Make `gymnasium.make` / `gymnasium.spec` of an id that is not registered load the
    installed env packages (`arborl.tasks.env_packages`, once) and look again.

    Gymnasium 1.x has no hook for this (its plugin loader is gone), so its id lookup,
    `gymnasium.envs.registration._find_spec`, which both call by its module-global name, is
    wrapped; gymnasium is pinned, and tests/envs/test_env_packages.py fails if the wrapper
    stops being reached. Where the function is missing (another Gymnasium), the packages are
    loaded now instead, which costs their imports but finds the same ids.
    """
    from gymnasium.envs import registration as gym_registration

    find = getattr(gym_registration, "_find_spec", None)
    if find is None:
        load_env_packages()
        return
    if getattr(find, "_arborl_packages", False):
        return

    def find_spec(env_id: str) -> EnvSpec:
        try:
            return find(env_id)
        except gymnasium.error.Error as e:
            missing = e
        broken = [p for p in load_env_packages() if p.error]  # once per process, then cached
        try:
            return find(env_id)
        except gymnasium.error.Error:
            if not broken:
                raise missing from None  # Gymnasium's own words for an id nobody registered
        why = "; ".join(f"{p.source} ({p.name} = {p.value}): {p.error}" for p in broken)
        raise gymnasium.error.Error(f"{missing} Installed env packages that failed to load: {why}") from None

    find_spec._arborl_packages = True  # type: ignore[attr-defined]
    gym_registration._find_spec = find_spec
