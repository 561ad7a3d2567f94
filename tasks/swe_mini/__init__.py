"""`swe-mini`: twelve SWE-bench instances over four small Python repositories shipped here.

    data/instances.jsonl       the instances (SWE-bench format, real commits and diffs)
    data/environments.json     per (repo, version): dependency files and install commands
    data/repos/*.bundle        the repositories (git bundles), built by `generate.py`

`load_tasks()` gives the portable form (the files at base_commit on the base image, the
environment installed by setup); `arborl eval` swaps in instance images on Docker
(`arborl.eval.instance_images`). The gold policy applies the gold patch with the env's `bash` tool,
runs the tests and submits; the empty policy submits at once.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..spec import CodeTask
from ..suites import Policy
from ..swebench import SWEEnvironment, SWEInstance, environment_for, load_environments, load_instances
from ..swebench.convert import apply_command, swe_parts, to_code_task

DATA = Path(__file__).with_name("data")
INSTANCES = DATA / "instances.jsonl"
ENVIRONMENTS = DATA / "environments.json"
REPOS = DATA / "repos"


def instances() -> list[SWEInstance]:
    return load_instances(INSTANCES)


def environments() -> list[SWEEnvironment]:
    return load_environments(ENVIRONMENTS)


def bundle_for(repo: str, root: Path = REPOS) -> Path:
    """The git bundle holding `repo` ('owner/name')."""
    path = root / f"{repo.replace('/', '__')}.bundle"
    if not path.is_file():
        raise FileNotFoundError(
            f"no bundle for {repo} in {root} (run `python -m arborl.tasks.swe_mini.generate`)"
        )
    return path


def _cache_root() -> Path:
    return Path(os.environ.get("ARBORL_CACHE", Path.home() / ".cache" / "arborl")) / "swe-mini"


@lru_cache(maxsize=32)
def clone_of(bundle: Path) -> Path:
    """A local clone of a bundle, made once per bundle content (cached on disk)."""
    digest = hashlib.sha256(bundle.read_bytes()).hexdigest()[:16]
    dest = _cache_root() / f"{bundle.stem}-{digest}"
    if not (dest / ".git").is_dir():
        tmp = dest.with_name(dest.name + f".partial-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "clone", "-q", "--no-checkout", str(bundle), str(tmp)], check=True, capture_output=True
        )
        try:
            tmp.rename(dest)
        except OSError:  # another process made it first
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def files_at(repo_dir: Path, commit: str) -> dict[str, str]:
    """The text files of `commit` (path → text), read with `git archive`."""
    data = subprocess.run(
        ["git", "-C", str(repo_dir), "archive", "--format=tar", commit], check=True, capture_output=True
    ).stdout
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                f = tar.extractfile(member)
                assert f is not None
                out[member.name] = f.read().decode("utf-8")
    return out


def load_tasks() -> list[CodeTask]:
    """The suite's tasks, portable form (runs on the base image; no image build needed)."""
    envs = environments()
    tasks = []
    for inst in instances():
        files = files_at(clone_of(bundle_for(inst.repo)), inst.base_commit)
        tasks.append(
            to_code_task(inst, environment_for(inst, envs), repo_files=files, metadata={"suite": "swe-mini"})
        )
    return tasks


def _call(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def gold_policy(task: CodeTask) -> Policy:
    """Apply the gold patch with `bash`, run the tests, submit."""
    parts = swe_parts(task)
    if parts is None:
        raise ValueError(f"task {task.id} is not a SWE-bench task (no instance in its metadata)")
    replies = [
        _call("bash", {"command": apply_command(parts[0].patch)}),
        _call("run_tests", {}),
        _call("submit", {}),
    ]

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        turn = sum(m.get("role") == "assistant" for m in messages)
        return replies[min(turn, len(replies) - 1)]

    return policy


def empty_policy(task: CodeTask) -> Policy:
    """Submit the repository unchanged."""
    return lambda messages, info: _call("submit", {})
