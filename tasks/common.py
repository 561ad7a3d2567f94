"""What every benchmark folder shares: ``"package.module:attribute"`` references, and the
protocols between a suite and what runs it (a scripted policy, a host tool's episode).

References are resolved in one place. Suites name their loaders and policies this way, tasks
their tool handlers and verifiers, the env registry its classes, the engine registry its
backends: the module is imported only when the reference is used, so listing what exists
imports nothing heavy.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from .task_types import Task


class EntryPointError(LookupError):
    """A reference is malformed or names nothing importable (the message says which)."""


def load_entry_point(ref: str) -> Any:
    """The object that ``"package.module:attribute"`` names (the module is imported)."""
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise EntryPointError(f"entry point {ref!r} is not of the form 'package.module:attribute'")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise EntryPointError(f"cannot load {ref}: {type(e).__name__}: {e}") from e


class Policy(Protocol):
    """A scripted text policy, ``(messages, info) -> reply`` (sync or async): what
    `arborl.envs.episodes.run_episode` drives, what a suite's gold and empty factories return, what
    `Agent.run_episode(demo=...)` replays. The one definition: import it from here."""

    def __call__(self, messages: list[dict[str, Any]], info: dict[str, Any], /) -> Awaitable[str] | str: ...


PolicyFactory = Callable[[Task], Policy]


def content_text(content: Any) -> str:
    """What a scripted policy reads of a message's content: the string, or the text parts of
    a list of parts (an env that shows pictures) joined."""
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return str(content or "")


class HostToolEpisode(Protocol):
    """What a host tool that asks for it (a parameter named `episode`) is given: the task and
    a dict that lives as long as the episode, for tools with state (a door that moves the
    agent to another room). The tool env passes one (`arborl.envs.function_calling.ToolEpisode`)."""

    @property
    def task(self) -> Task: ...

    @property
    def state(self) -> dict[str, Any]: ...
