"""Prime Intellect `verifiers` environments as task sources: a verifiers environment's dataset
rows as arborl tasks (the env that plays them: `arborl.envs.prime_verifiers`).

    env = load_verifiers_environment("vf-guess", {"n": 4})    # verifiers.load_environment, cached
    tasks = verifiers_tasks("vf-guess", {"n": 4}, prefix="vf-guess")

A verifiers environment is a module exposing `load_environment(**args)` that returns a
`verifiers.Environment` (`SingleTurnEnv`, `MultiTurnEnv`, `ToolEnv`, ...): a dataset of
prompts (columns `prompt`, `answer`, `info`, `task`, `example_id`), a rollout protocol and a
`Rubric`. This is the classic API (verifiers 0.1 / 0.2; 0.3 keeps it as `verifiers.legacy`);
verifiers 0.4 replaced it with tasksets and harnesses, which this does not read.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from .task_types import Task

#: How to install what the adapter needs without moving arborl's pins (the file says why).
INSTALL = (
    "pip install --no-deps -r scripts/verifiers.txt (verifiers 0.2.1 and what its import reads; docs/envs.md)"
)


class VerifiersTask(Task):
    """One row of a verifiers environment's dataset, as its `rollout` takes it."""

    row: dict[str, Any] = Field(description="prompt (chat messages), answer, info, task, example_id")


_ENVIRONMENTS: dict[str, Any] = {}


def load_verifiers_environment(name: str, env_args: Mapping[str, Any] | None = None) -> Any:
    """`verifiers.load_environment(name, **env_args)`, once per process and arguments; refuses
    what arborl cannot play one episode at a time (a rubric that scores groups together)."""
    key = json.dumps([name, dict(env_args or {})], sort_keys=True, default=repr)
    if key not in _ENVIRONMENTS:
        try:
            import verifiers
        except ImportError as e:
            raise ImportError(f"verifiers environments need the verifiers package: {INSTALL}") from e
        load = getattr(verifiers, "load_environment", None)
        if load is None or not hasattr(verifiers, "MultiTurnEnv"):
            raise ImportError(
                f"verifiers {getattr(verifiers, '__version__', '?')} has no classic API "
                f"(load_environment, MultiTurnEnv); arborl reads verifiers 0.1-0.2: {INSTALL}"
            )
        try:
            env = load(name, **dict(env_args or {}))
        except Exception as e:
            raise _explained(e) from e
        if env.rubric.has_group_rewards:
            raise ValueError(
                f"verifiers environment {name!r} has group reward functions, which score a group of "
                "rollouts together; arborl scores each episode on its own (an env-graded suite)"
            )
        _ENVIRONMENTS[key] = env
    return _ENVIRONMENTS[key]


def _explained(error: Exception) -> Exception:
    """verifiers says "install as verifiers[all]" for any import its lazy classes fail; the usual
    cause here is another top-level `agents` found before openai-agents' (ToolEnv's): an arborl
    checkout's own `agents/` folder, when Python runs from its root (`python -m`/`-c` put the
    current directory first on sys.path)."""
    spec = importlib.util.find_spec("agents")
    if "verifiers[all]" in str(error) and spec is not None and spec.origin is not None:
        origin = Path(spec.origin).parent
        if not (origin / "function_schema.py").exists():
            return ImportError(
                f"{error} (`import agents` finds {origin}, not openai-agents': run from outside "
                "that folder's parent, e.g. not from the root of an arborl checkout)"
            )
    return error


def verifiers_tasks(
    name: str,
    env_args: Mapping[str, Any] | None = None,
    *,
    split: str = "eval",
    limit: int | None = None,
    prefix: str | None = None,
) -> list[VerifiersTask]:
    """The environment's dataset rows as tasks: `split` "eval" (its eval dataset, else its
    training one, as verifiers' own evaluation reads it) or "train"; ids `prefix/example_id`."""
    if split not in ("eval", "train"):
        raise ValueError(f"split must be 'eval' or 'train', not {split!r}")
    env = load_verifiers_environment(name, env_args)
    dataset = env.get_eval_dataset() if split == "eval" else env.get_dataset()
    tasks = []
    for i, row in enumerate(dataset):
        if limit is not None and i >= limit:
            break
        plain = json.loads(json.dumps(dict(row), default=str))  # Arrow's values as plain JSON
        tasks.append(VerifiersTask(id=f"{prefix or name}/{plain.get('example_id', i)}", row=plain))
    return tasks


__all__ = ["INSTALL", "VerifiersTask", "load_verifiers_environment", "verifiers_tasks"]
