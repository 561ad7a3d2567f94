"""Harbor task folders → `HarborTask`s, one bad folder never stopping the others.

    tasks = load_tasks(Path("my-tasks"))      # every folder holding a task.toml, searched down
    [t.error for t in tasks if t.error]       # "task.toml: [verifier] timout_sec: unknown key", ...

A task folder (Harbor's layout) holds `task.toml`, `instruction.md`, `environment/Dockerfile`
(or `[environment] docker_image`), `tests/test.sh` and optionally `solution/solve.sh`. A folder
of the suite that looks like a task (it has an `instruction.md`, `tests/` or `environment/`) but
lacks `task.toml` is a task too: one with an error naming the missing file. Tests and solution
files must be regular files (no links: what the verifier runs is exactly what is in the folder).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path

from .config import TaskConfig, TaskConfigError
from .dockerfile import map_dockerfile
from .task import HarborTask

log = logging.getLogger(__name__)

#: Files every task folder must have, besides its image's recipe.
REQUIRED = ("task.toml", "instruction.md", "tests/test.sh")
#: What makes a folder look like a task when its task.toml is missing.
TASK_SIGNS = ("instruction.md", "tests", "environment", "solution")
#: Tests or solution files larger than this in all are refused (they travel into the sandbox).
MAX_FILES_BYTES = 64 * 1024 * 1024
_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class HarborTaskError(ValueError):
    """A task folder cannot be used as it is; the message names the task and the file."""

    environment_broken = True  # eval records it as the task's environment error, never a 0


def is_task_folder(path: Path) -> bool:
    return (path / "task.toml").is_file()


def find_task_folders(root: Path) -> list[Path]:
    """`root` itself if it is a task, else every task folder below it (not inside another
    task, hidden folders skipped), plus folders that look like tasks without a task.toml."""
    if is_task_folder(root):
        return [root]
    found: list[Path] = []
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if here != root and (is_task_folder(here) or _looks_like_task(here)):
            found.append(here)
            dirnames[:] = []  # a task's own folders (tests/, environment/) are not tasks
    return found


def _looks_like_task(path: Path) -> bool:
    return (path / "instruction.md").is_file() or (
        (path / "tests").is_dir() and (path / "environment").is_dir()
    )


def has_tasks(path: Path) -> bool:
    """Whether `path` is a task folder or holds one (what `suite=PATH` reads as Harbor's)."""
    if not path.is_dir():
        return False
    if is_task_folder(path):
        return True
    return any(True for _ in _task_tomls(path))


def _task_tomls(path: Path) -> list[Path]:
    return [p for p in path.rglob("task.toml") if not any(part.startswith(".") for part in p.parts)]


def task_id(root: Path, folder: Path) -> str:
    return folder.name if folder == root else folder.relative_to(root).as_posix()


def load_tasks(root: Path) -> list[HarborTask]:
    """Every task under `root` (see the module doc); broken ones carry their error."""
    if not root.is_dir():
        raise HarborTaskError(f"{root} is not a folder of Harbor tasks")
    tasks = [load_task(folder, task_id(root, folder)) for folder in find_task_folders(root)]
    for t in tasks:
        if t.error or t.image_error:
            log.warning("Harbor task %s cannot run: %s", t.id, t.error or t.image_error)
    return tasks


def load_task(folder: Path, tid: str | None = None) -> HarborTask:
    """One task folder; never raises for what the folder holds."""
    tid = tid or folder.name
    try:
        return _load(folder, tid)
    except HarborTaskError as e:
        return HarborTask(id=tid, path=str(folder.resolve()), error=str(e))


def _load(folder: Path, tid: str) -> HarborTask:
    def fail(file: str, why: str) -> HarborTaskError:
        return HarborTaskError(f"task {tid}: {file}: {why}")

    for rel in REQUIRED:
        if not (folder / rel).is_file():
            raise fail(rel, "missing (a Harbor task folder needs task.toml, instruction.md, tests/test.sh)")
    try:
        config = TaskConfig.from_toml((folder / "task.toml").read_text(encoding="utf-8"))
    except (TaskConfigError, UnicodeDecodeError) as e:
        raise fail("task.toml", str(e)) from None
    try:
        instruction = (folder / "instruction.md").read_text(encoding="utf-8").strip()
    except UnicodeDecodeError as e:
        raise fail("instruction.md", f"not UTF-8 text ({e.reason})") from None
    if not instruction:
        raise fail("instruction.md", "empty")
    for sub in ("tests", "solution"):
        problem = check_files(folder / sub)
        if problem:
            raise fail(f"{sub}/{problem[0]}", problem[1])
    env = config.environment
    dockerfile = folder / "environment" / "Dockerfile"
    image_error = ""
    if dockerfile.is_file():
        plan = map_dockerfile(dockerfile.read_text(encoding="utf-8", errors="replace"), env.workdir)
        family, workdir, image_error = plan.family, plan.workdir, plan.problem_text()
    elif env.docker_image:
        # A prebuilt image cannot be pulled: one of a family the base stands in for is that base.
        from .dockerfile import image_family

        family = image_family(env.docker_image) or ""
        workdir = env.workdir or "/app"
        if not family:
            image_error = (
                f"task.toml: [environment] docker_image = {env.docker_image!r} cannot be pulled here, "
                "and arborl's offline base stands in only for debian, ubuntu and python images"
            )
    else:
        raise fail("environment/Dockerfile", "missing (and task.toml names no [environment] docker_image)")
    note = config.network_note()
    return HarborTask(
        id=tid,
        path=str(folder.resolve()),
        instruction=instruction,
        workdir=workdir,
        family=family or "debian",
        agent_timeout_s=config.agent.timeout_sec,
        verifier_timeout_s=config.verifier.timeout_sec,
        build_timeout_s=env.build_timeout_sec,
        verifier_env=_resolve(config.verifier.env, fail, "[verifier] env"),
        solution_env=_resolve(config.solution.env, fail, "[solution] env"),
        agent_env=_resolve(env.env, fail, "[environment] env"),
        cpus=env.cpus,
        memory_mb=env.memory_mb,
        has_solution=(folder / "solution" / "solve.sh").is_file(),
        image_error=f"task {tid}: {image_error}" if image_error else "",
        metadata={"harbor": config.metadata, **({"network": note} if note else {})},
    )


def check_files(folder: Path) -> tuple[str, str] | None:
    """(relative path, why) of the first file under `folder` that cannot travel to the sandbox."""
    if not folder.exists():
        return None
    total = 0
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            return rel, "a symbolic link; tests and solutions must be regular files"
        if path.is_file():
            total += path.stat().st_size
            if total > MAX_FILES_BYTES:
                return rel, f"the folder is larger than {MAX_FILES_BYTES // 2**20} MB"
        elif not path.is_dir():
            return rel, "not a regular file"
    return None


def read_files(folder: Path) -> dict[str, bytes]:
    """Relative path → content of every file under `folder` (checked by `check_files`)."""
    problem = check_files(folder)
    if problem:
        raise HarborTaskError(f"{folder}/{problem[0]}: {problem[1]}")
    if not folder.is_dir():
        return {}
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _resolve(values: Mapping[str, str], fail, where: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Harbor's `${VAR}` / `${VAR:-default}` templates, filled from the host's environment."""
    out = {}
    for key, value in values.items():

        def one(m: re.Match[str], key: str = key) -> str:
            name, default = m.group(1), m.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            raise fail(
                "task.toml", f"{where} {key} needs the host's environment variable {name}, which is not set"
            )

        out[key] = _TEMPLATE.sub(one, value)
    return out
