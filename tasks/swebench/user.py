"""A user's SWE-bench instances as a suite (`arborl eval suite=FILE_OR_DATASET`)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from ..suites import Suite
from ..task_types import CodeTask
from .convert import to_code_task
from .instance import SWEEnvironment, environment_for
from .loaders import load_environments, load_instances
from .repos import find_repository


def load_swe_file(
    path: str | Path,
    repos_dirs: Sequence[str | Path] = (),
    environments: Sequence[SWEEnvironment] = (),
    split: str | None = None,
) -> list[CodeTask]:
    """The portable CodeTasks of a SWE-bench file (repositories read from `repos_dirs`)."""
    tasks = []
    sources: dict[str, Any] = {}
    for inst in load_instances(path, split=split):
        if inst.repo not in sources:
            sources[inst.repo] = find_repository(inst.repo, repos_dirs)
        files = sources[inst.repo].files_at(inst.base_commit)
        env = environment_for(inst, list(environments))
        tasks.append(to_code_task(inst, env, repo_files=files, metadata={"suite": str(path)}))
    return tasks


def swe_suite(
    name: str,
    path: Path,
    repos_dirs: Sequence[str | Path] = (),
    environments: str | Path | None = None,
    split: str | None = None,
) -> Suite:
    """The suite of the SWE-bench instances at `path` (see `arborl.tasks.user_suites`)."""
    envs = load_environments(environments) if environments else []
    return Suite(
        name,
        "arborl/Code-v0",
        partial(load_swe_file, path, tuple(repos_dirs), tuple(envs), split),
        description=f"SWE-bench instances from {path}",
        gold="arborl.tasks.swebench.policies:gold_policy",
        empty="arborl.tasks.swebench.policies:empty_policy",
        max_turns=30,
        tags=("code", "swe-bench", "user"),
    )
