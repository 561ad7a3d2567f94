"""`swe-mini`: twelve SWE-bench instances over four small Python repositories shipped here.

    data/instances.jsonl       the instances (SWE-bench format, real commits and diffs)
    data/environments.json     per (repo, version): dependency files and install commands
    data/repos/*.bundle        the repositories (git bundles), built by `generate.py`

`load_tasks()` gives the portable form (the files at base_commit on the base image, the
environment installed by setup); `arborl eval` swaps in instance images on Docker
(`arborl.envs.code.instance_images`). Its gold and empty policies are SWE-bench's (`..policies`).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from functools import lru_cache
from pathlib import Path

from ...task_types import CodeTask
from ..convert import to_code_task
from ..instance import SWEEnvironment, SWEInstance, environment_for
from ..loaders import load_environments, load_instances

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
            f"no bundle for {repo} in {root} (run `python -m arborl.tasks.swebench.mini.generate`)"
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
