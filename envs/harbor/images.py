"""Harbor task images, built on this machine's offline base (the plan: `tasks/harbor/dockerfile.py`).

    image = build_task_image(client, task)     # blocking: a Docker build; cached by content
    image.tag, image.env                       # the tag, and the ENV the Dockerfile set

The task's `FROM` becomes a family layer over arborl's base image (`arborl/harbor-base`): the
host's CA bundle (so pip's TLS works behind the registries' proxy here) and, for Python
images, pip, venv and `python`. The task's own instructions follow as written, built with
the default bridge network: `apt-get` and `pip install` reach the registries this machine
reaches, and anything else fails. A failed build names the task, the Dockerfile's line and
docker's reason (`HarborImageError`, an infrastructure error: never the agent's 0). Images are
tagged by the hash of the base (`content_salt`: engines holding the same base agree on every
tag), the Dockerfile and the build context: built once.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import ssl
import tarfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arborl.sandboxes import DEFAULT_IMAGE
from arborl.sandboxes.images import content_salt, image_exists
from arborl.tasks.harbor import HarborTask, map_dockerfile

from ..benchmarks import InfraError

REPOSITORY = "arborl/harbor"
BASE_REPOSITORY = "arborl/harbor-base"
CA_IN_IMAGE = "/usr/local/share/arborl/ca.crt"
#: Set for every step of a task's build (ARG: not kept in the image): pip trusts the host's
#: CA bundle and installs into Debian's system Python, apt asks nothing.
BUILD_ARGS = (f"PIP_CERT={CA_IN_IMAGE}", "PIP_BREAK_SYSTEM_PACKAGES=1", "DEBIAN_FRONTEND=noninteractive")
FAMILY_STEPS = {
    "debian": [f"COPY arborl-ca.crt {CA_IN_IMAGE}"],
    "python": [
        f"COPY arborl-ca.crt {CA_IN_IMAGE}",
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
        "python3-pip python3-venv python-is-python3 && rm -rf /var/lib/apt/lists/*",
    ],
}
_STEP = re.compile(r"^Step (\d+)/(\d+) : ")
_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


class HarborImageError(InfraError):
    """A task's image cannot be built here (permanent: retrying builds it the same way)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, permanent=True)


@dataclass(frozen=True)
class TaskImage:
    tag: str
    env: dict[str, str] = field(default_factory=dict)


def host_ca_bundle() -> bytes:
    """The CA bundle pip and Python trust on this host (with any proxy's CA it added)."""
    for candidate in (os.environ.get("PIP_CERT"), ssl.get_default_verify_paths().cafile):
        if candidate and os.path.isfile(candidate):
            return Path(candidate).read_bytes()
    default = Path("/etc/ssl/certs/ca-certificates.crt")
    return default.read_bytes() if default.is_file() else b""


def _context(
    dockerfile: str, folder: Path | None, extra: Mapping[str, bytes], salt: str
) -> tuple[bytes, str]:
    """The build context as a tar, and the hash of everything in it (modes included)."""
    files: list[tuple[str, bytes, int]] = [("Dockerfile", dockerfile.encode(), 0o644)]
    if folder is not None and folder.is_dir():
        for p in sorted(folder.rglob("*")):
            if p.is_file() and p.name != "Dockerfile":
                files.append(
                    (
                        p.relative_to(folder).as_posix(),
                        p.read_bytes(),
                        0o755 if os.access(p, os.X_OK) else 0o644,
                    )
                )
    files += [(name, data, 0o644) for name, data in sorted(extra.items())]
    digest = hashlib.sha256(salt.encode())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, mode in files:
            digest.update(f"{name}\0{mode}\0".encode() + hashlib.sha256(data).digest())
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue(), digest.hexdigest()


def _lock(tag: str) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(tag, threading.Lock())


def _build(
    client: Any,
    dockerfile: str,
    *,
    folder: Path | None = None,
    extra: Mapping[str, bytes] | None = None,
    repository: str,
    timeout: float,
) -> tuple[str, list[str], str]:
    """(tag, build log, error: '' when built). Cached: an image with the tag is reused."""
    import docker.errors
    import requests

    base = dockerfile.split("\n", 1)[0].removeprefix("FROM ").strip()
    try:
        salt = content_salt(client.images.get(base))
    except docker.errors.ImageNotFound:
        return "", [], f"the base image {base} is missing: run `arborl sandbox build`"
    data, digest = _context(dockerfile, folder, extra or {}, salt)
    tag = f"{repository}:{digest[:16]}"
    with _lock(tag):
        if image_exists(client, tag):
            return tag, [], ""
        lines: list[str] = []
        try:
            for chunk in client.api.build(
                fileobj=io.BytesIO(data),
                custom_context=True,
                tag=tag,
                rm=True,
                forcerm=True,
                network_mode="bridge",
                decode=True,
                timeout=timeout,
                labels={"arborl.content": digest},
            ):
                if "stream" in chunk:
                    lines.extend(str(chunk["stream"]).splitlines())
                if "error" in chunk:
                    return "", lines, str(chunk["error"]).strip()
        except requests.exceptions.ReadTimeout:
            return "", lines, f"the build took longer than {timeout:g} s ([environment] build_timeout_sec)"
        except (docker.errors.APIError, requests.exceptions.ConnectionError) as e:
            return "", lines, f"docker refused the build: {e}"
    return tag, lines, ""


def family_base(client: Any, family: str, base: str = DEFAULT_IMAGE) -> str:
    """The family layer (`arborl/harbor-base`) over `base`, built once."""
    steps = FAMILY_STEPS[family]
    dockerfile = f"FROM {base}\n" + "\n".join(steps) + "\n"
    tag, lines, error = _build(
        client,
        dockerfile,
        extra={"arborl-ca.crt": host_ca_bundle()},
        repository=BASE_REPOSITORY,
        timeout=1800,
    )
    if error:
        raise HarborImageError(f"the {family} base layer cannot be built: {error}\n" + "\n".join(lines[-20:]))
    return tag


def task_dockerfile(base: str, task: HarborTask) -> tuple[str, list[int | None]]:
    """The Dockerfile built for `task`, and the source line of each of its steps (None: ours)."""
    text = (task.folder / "environment" / "Dockerfile").read_text(encoding="utf-8", errors="replace")
    plan = map_dockerfile(text)
    steps: list[tuple[int | None, str]] = [(None, f"FROM {base}")]
    steps += [(None, f"ARG {arg}") for arg in BUILD_ARGS]
    steps += [(s.line, s.text) for s in plan.steps]
    # The sandbox's server starts as root and runs the agent's commands as its own user.
    steps.append((None, "USER root"))
    return "\n".join(text for _, text in steps) + "\n", [line for line, _ in steps]


def build_task_image(client: Any, task: HarborTask, base: str = DEFAULT_IMAGE) -> TaskImage:
    """Build (or find) `task`'s image; HarborImageError names the line that failed and why."""
    if task.image_error:
        raise HarborImageError(task.image_error)
    family = family_base(client, task.family, base)
    if not (task.folder / "environment" / "Dockerfile").is_file():  # [environment] docker_image
        return TaskImage(_with_uv(client, task, family), _image_env(client, family))
    dockerfile, lines = task_dockerfile(family, task)
    tag, log, error = _build(
        client,
        dockerfile,
        folder=task.folder / "environment",
        repository=REPOSITORY,
        timeout=task.build_timeout_s,
    )
    if error:
        raise HarborImageError(f"task {task.id}: {_where(log, lines)}{error}{_tail(log)}")
    return TaskImage(_with_uv(client, task, tag), _image_env(client, tag))


def _with_uv(client: Any, task: HarborTask, image: str) -> str:
    """`image`, with the uv its tests run offline (`uv_layer.py`) where they run any."""
    from .uv_layer import uv_layer  # here: uv_layer builds with this module's _build

    return uv_layer(client, task, image)


def _where(log: list[str], lines: list[int | None]) -> str:
    """`environment/Dockerfile:LINE: ` of the step the build stopped at, from docker's log."""
    step = 0
    for text in log:
        m = _STEP.match(text)
        if m:
            step = int(m.group(1))
    if 1 <= step <= len(lines) and lines[step - 1] is not None:
        return f"environment/Dockerfile:{lines[step - 1]}: "
    return "environment/Dockerfile: "


def _tail(log: list[str], n: int = 12) -> str:
    shown = [line for line in log if line.strip() and not line.startswith(" ---> ")][-n:]
    return ("\nlast build output:\n" + "\n".join(shown)) if shown else ""


def _image_env(client: Any, tag: str) -> dict[str, str]:
    """The ENV the image carries (the Dockerfile's `ENV` lines, over the base's)."""
    pairs = client.images.get(tag).attrs.get("Config", {}).get("Env") or []
    return dict(p.split("=", 1) for p in pairs if "=" in p)
