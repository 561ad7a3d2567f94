"""uv for a task's tests, offline: the layer a task image gets when its `tests/test.sh` runs uv.

    tag = uv_layer(client, task, image_tag)    # the image itself when the tests run no uv

What the tests need is read by `tasks/harbor/uv_plan.py`. The layer holds:
- uv and uvx from PyPI's `uv` wheel (fetched on the host by pip, the version the installer URL
  names), behind a wrapper at `/root/.local/bin/{uv,uvx}` with `/root/.local/bin/env` (and
  `/root/.cargo/env`, older installers') that puts them on PATH: where `curl ... install.sh |
  sh` would have put them, so `source $HOME/.local/bin/env` works after that line failed offline.
- uv's cache (`/root/.cache/uv`) warmed at build time, through the bridge network that reaches
  PyPI, with what the script's uv commands install (and the locked project `uv add` makes).
- curl, so that the scripts' `apt-get install -y curl` is satisfied offline.

The wrapper runs uv offline (`UV_OFFLINE`, `UV_PYTHON_DOWNLOADS=never`) and asks for the image's
`python3` where the script names a version (`-p 3.13`): no other Python can be had here, as the
`FROM python:3.13` the task names is Debian's Python too (docs/envs.md). Everything is root's
(`/root` is 0700): the agent's user can neither read the cache nor plant a package in it.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from arborl.tasks.harbor import HarborTask
from arborl.tasks.harbor.uv_plan import UvPlan, plan_uv

from .images import CA_IN_IMAGE, HarborImageError, _build, _tail

REPOSITORY = "arborl/harbor-uv"
REAL = "/usr/local/lib/arborl-uv"
#: The environment of a project the tests make: root's, never a .venv the agent planted.
PROJECT_ENV = "/root/.local/share/arborl-uv/project-env"
#: Why a wrapper and not uv's own config: `-p 3.13` on the command line beats any config file
#: or UV_PYTHON, and no 3.13 exists here.
WRAPPER = f"""#!/bin/bash
# arborl: uv as the task's tests run it, offline and out of the agent's reach (envs/harbor/uv_layer.py)
export UV_OFFLINE=1 UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1
# the agent's folder may hold uv.toml, [tool.uv] and .python-version: none is read
export UV_NO_CONFIG=1 UV_PYTHON=python3 UV_PROJECT_ENVIRONMENT={PROJECT_ENV}
version='^(cpython|python)?[-@]?[0-9][0-9.]*$|^[<>=~!]'
args=()
sub=""
where="$PWD"
while (($#)); do
  case "$1" in
    -p|--python)
      if [[ $# -ge 2 && "$2" =~ $version ]]; then args+=("$1" python3); shift 2; continue; fi ;;
    --python=*|-p=*)
      if [[ "${{1#*=}}" =~ $version ]]; then args+=(--python=python3); shift; continue; fi ;;
    --directory|--project)
      # where uv looks for the project: there, not here
      if [[ -z "$sub" && $# -ge 2 ]]; then where="$(cd "$2" 2>/dev/null && pwd || echo "$2")"; args+=("$1" "$2"); shift 2; continue; fi ;;
    --directory=*|--project=*)
      [[ -z "$sub" ]] && where="$(cd "${{1#*=}}" 2>/dev/null && pwd || echo "${{1#*=}}")" ;;
    --cache-dir|--config-file|--color)
      if [[ -z "$sub" && $# -ge 2 ]]; then args+=("$1" "$2"); shift 2; continue; fi ;;
    -*) ;;
    *) [[ -z "$sub" ]] && sub="$1" ;;
  esac
  args+=("$1"); shift
done
if [[ "$(basename "$0")" == uv && " add run sync lock remove tree export version " == *" $sub "* ]]; then
  d="$where"
  while :; do
    if [[ -e "$d/pyproject.toml" ]]; then
      if [[ "$(stat -L -c %u "$d/pyproject.toml")" != 0 ]]; then
        echo "arborl: $d/pyproject.toml is not root's (the agent's): the tests' uv does not run it" >&2
        exit 2
      fi
      break
    fi
    [[ "$d" == / ]] && break
    d="$(dirname "$d")"
  done
fi
exec {REAL}/"$(basename "$0")" "${{args[@]}}"
"""
ENV_SCRIPT = """#!/bin/sh
case ":${PATH}:" in
  *:"$HOME/.local/bin":*) ;;
  *) export PATH="$HOME/.local/bin:$PATH" ;;
esac
"""


class UvUnavailable(RuntimeError):
    """PyPI's uv wheel cannot be had on this host."""


def _cache_root() -> Path:
    return Path(os.environ.get("ARBORL_CACHE", Path.home() / ".cache" / "arborl")) / "uv"


def uv_binaries(version: str = "") -> tuple[bytes, bytes, str]:
    """(uv, uvx, the version got) from PyPI's `uv` wheel for this machine's architecture,
    cached on the host. A version PyPI does not have falls back to the newest."""
    machine = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(
        platform.machine().lower(), platform.machine()
    )
    errors: list[str] = []
    for want in ([version] if version else []) + [""]:
        folder = _cache_root() / (want or "latest") / machine
        if (folder / "uv").is_file() and (folder / "uvx").is_file():
            return (
                (folder / "uv").read_bytes(),
                (folder / "uvx").read_bytes(),
                (folder / "VERSION").read_text(),
            )
        with tempfile.TemporaryDirectory() as tmp:
            spec = f"uv=={want}" if want else "uv"
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
            cmd += ["--platform", f"manylinux2014_{machine}", "-d", tmp, spec]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            wheels = list(Path(tmp).glob("uv-*.whl"))
            if proc.returncode or not wheels:
                errors.append(
                    f"pip download {spec}: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
                )
                continue
            with zipfile.ZipFile(wheels[0]) as z:
                names = {Path(n).name: n for n in z.namelist() if ".data/scripts/" in n}
                if not {"uv", "uvx"} <= names.keys():
                    errors.append(f"{wheels[0].name} holds no uv/uvx binaries")
                    continue
                got = wheels[0].name.split("-")[1]
                folder.mkdir(parents=True, exist_ok=True)
                # written whole, then renamed: a build in another thread never reads half a binary
                for name, data in (
                    ("VERSION", got.encode()),
                    ("uv", z.read(names["uv"])),
                    ("uvx", z.read(names["uvx"])),
                ):
                    with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{name}.", delete=False) as part:
                        part.write(data)
                    Path(part.name).replace(folder / name)
                return z.read(names["uv"]), z.read(names["uvx"]), got
    raise UvUnavailable("; ".join(errors))


def uv_dockerfile(image: str, plan: UvPlan, ca: str) -> str:
    """The layer over `image` (pure): uv, its wrapper, curl, and the warmed cache."""
    reqs = " ".join(shlex.quote(r) for r in plan.requirements)
    uv = f"{REAL}/uv"
    warm = ['w="$(mktemp -d)"', 'cd "$w"']
    if reqs:
        warm.append(f"{uv} pip install --quiet --python python3 --target ./site {reqs}")
    if reqs and plan.project:
        warm.append(
            f"{uv} init --quiet --bare --python python3 project && cd project && {uv} add --quiet {reqs}"
        )
    warm.append('cd / && rm -rf "$w"')
    return (
        "\n".join(
            [
                f"FROM {image}",
                "USER root",
                f"ARG SSL_CERT_FILE={ca}",
                "ARG UV_PYTHON_DOWNLOADS=never",
                "ARG DEBIAN_FRONTEND=noninteractive",
                # (docker's classic builder, which the API's build is, has no COPY --chmod)
                f"COPY uv uvx {REAL}/",
                "COPY wrapper /root/.local/bin/uv",
                "COPY wrapper /root/.local/bin/uvx",
                "COPY env /root/.local/bin/env",
                "COPY env /root/.cargo/env",
                f"RUN chmod 0755 {REAL} {REAL}/uv {REAL}/uvx /root/.local/bin/uv /root/.local/bin/uvx && chmod 0700 /root"
                " && (command -v curl >/dev/null || (apt-get update && apt-get install -y --no-install-recommends"
                " curl ca-certificates && rm -rf /var/lib/apt/lists/*))",
                "RUN " + " && ".join(warm),
            ]
        )
        + "\n"
    )


def uv_layer(client: Any, task: HarborTask, image: str) -> str:
    """`image` with uv for `task`'s tests (the image itself when they run none)."""
    test_sh = task.folder / "tests" / "test.sh"
    text = test_sh.read_text(encoding="utf-8", errors="replace") if test_sh.is_file() else ""
    plan = plan_uv(text)
    if not plan.needed:
        return image
    try:
        uv, uvx, _ = uv_binaries(plan.version)
    except (UvUnavailable, OSError, subprocess.SubprocessError) as e:
        raise HarborImageError(
            f"task {task.id}: tests/test.sh runs uv, and uv cannot be had from PyPI: {e}"
        ) from e
    tag, log, error = _build(
        client,
        uv_dockerfile(image, plan, CA_IN_IMAGE),
        extra={"uv": uv, "uvx": uvx, "wrapper": WRAPPER.encode(), "env": ENV_SCRIPT.encode()},
        repository=REPOSITORY,
        timeout=task.build_timeout_s,
    )
    if error:
        wanted = ", ".join(plan.requirements) or "nothing"
        raise HarborImageError(
            f"task {task.id}: tests/test.sh runs uv, and what its uv commands install ({wanted}) "
            f"cannot be fetched for the image's python3: {error}{_tail(log)}"
        )
    return str(tag)
