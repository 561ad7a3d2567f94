"""`swe-real`: SWE-bench instances cut from the history of real open-source repositories.

    data/instances.jsonl       the instances (a real fix commit: its code diff is the gold patch,
                               its test diff the test patch; FAIL_TO_PASS / PASS_TO_PASS measured
                               by running the tests in the base image)
    data/environments.json     per repository: test command, log parser, wheels (SWE-bench specs)
    data/repos/*.bundle        the repositories' histories (git bundles)

Made by `python scripts/generate_swe_real.py` from bare mirrors of the repositories. They
cover what swe-mini's made-up repositories do not: src layouts (the package importable only
from `src/`), a unittest runner, and a third-party test dependency installed from wheels.
`load_tasks()` gives the portable form (files at base_commit on the base image; wheels fetched
on the host and unpacked by setup); `arborl eval` swaps in instance images on Docker.
Its gold and empty policies are SWE-bench's (`..policies`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ...task_types import CodeTask
from ..convert import to_code_task
from ..instance import SWEEnvironment, SWEInstance, environment_for
from ..loaders import load_environments, load_instances
from ..repos import find_repository
from ..wheels import fetch_wheels

DATA = Path(__file__).with_name("data")
INSTANCES = DATA / "instances.jsonl"
ENVIRONMENTS = DATA / "environments.json"
REPOS = DATA / "repos"

__all__ = ["ENVIRONMENTS", "INSTANCES", "REPOS", "instances", "load_tasks"]


def instances() -> list[SWEInstance]:
    return load_instances(INSTANCES)


def environments() -> list[SWEEnvironment]:
    return load_environments(ENVIRONMENTS)


@lru_cache(maxsize=8)
def _wheels(requirements: tuple[str, ...]) -> dict[str, bytes]:
    return fetch_wheels(requirements)


def load_tasks() -> list[CodeTask]:
    """The suite's tasks, portable form (the base image; no image build needed)."""
    envs = environments()
    tasks = []
    for inst in instances():
        env = environment_for(inst, envs)
        files = find_repository(inst.repo, [REPOS]).files_at(inst.base_commit)
        wheels = _wheels(env.pip) if env.pip else None
        tasks.append(to_code_task(inst, env, repo_files=files, wheels=wheels, metadata={"suite": "swe-real"}))
    return tasks
