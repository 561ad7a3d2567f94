"""Third-party dependencies of SWE environments as wheels: fetched on the host, unpacked offline.

    wheels = fetch_wheels(["attrs==23.2.0"])     # file name -> bytes (pip download, cached)

The package index is reachable from the host only; sandboxes never reach a network. The base
image has no pip, so the wheels are unpacked by `UNPACK_WHEELS`, a stdlib script, either into
an environment image layer (`images.environment_layer`) or, in the portable form, by a setup
step run as root (`convert.to_code_task(..., wheels=...)`). Binary wheels only: nothing is
compiled, and compiled wheels must fit the base image's CPython (3.11, x86-64 manylinux).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

#: Unpacks wheels into the image's Python (the base image has no pip): pure and platform
#: files into site-packages, scripts into the scripts directory, other .data parts dropped.
UNPACK_WHEELS = """import glob, os, sys, sysconfig, zipfile
site, scripts = sysconfig.get_paths()["purelib"], sysconfig.get_paths()["scripts"]
for wheel in sorted(glob.glob(os.path.join(sys.argv[1], "*.whl"))):
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            parts = info.filename.split("/")
            if info.is_dir():
                continue
            if parts[0].endswith(".data"):
                kind, rest = parts[1], parts[2:]
                if kind in ("purelib", "platlib"):
                    dest = os.path.join(site, *rest)
                elif kind == "scripts":
                    dest = os.path.join(scripts, *rest)
                else:
                    continue
            else:
                dest = os.path.join(site, *parts)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with z.open(info) as src, open(dest, "wb") as out:
                out.write(src.read())
            if parts[0].endswith(".data") and parts[1] == "scripts":
                os.chmod(dest, 0o755)
    print("unpacked", os.path.basename(wheel))
"""


class WheelFetchError(ValueError):
    """pip could not fetch an environment's requirements as wheels (on the host)."""


#: The base image's Python, which the wheels must fit (Debian bookworm, x86-64).
WHEEL_TARGET = ("3.11", ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64"))


def fetch_wheels(requirements: Sequence[str], cache: Path | None = None) -> dict[str, bytes]:
    """Wheels of `requirements` and their dependencies for the base image's Python, fetched on
    the host with `pip download` (binary wheels only: nothing is compiled) and cached by the
    requirement list. File name → bytes."""
    if not requirements:
        return {}
    key = hashlib.sha256(json.dumps([sorted(requirements), WHEEL_TARGET]).encode()).hexdigest()[:16]
    root = cache or Path(os.environ.get("ARBORL_CACHE", Path.home() / ".cache" / "arborl")) / "wheels"
    dest = root / key
    if not (dest / ".complete").is_file():
        # test workers or eval processes asking at once fetch once; none removes a copy another reads
        root.mkdir(parents=True, exist_ok=True)
        with open(root / f".{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (dest / ".complete").is_file():
                _download(requirements, dest)
    return {p.name: p.read_bytes() for p in sorted(dest.glob("*.whl"))}


def _download(requirements: Sequence[str], dest: Path) -> None:
    tmp = dest.with_name(dest.name + f".partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    version, platforms = WHEEL_TARGET
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--only-binary=:all:",
        "--dest",
        str(tmp),
        "--python-version",
        version,
        "--implementation",
        "cp",
    ]
    cmd += [arg for p in platforms for arg in ("--platform", p)]
    r = subprocess.run([*cmd, *requirements], capture_output=True, text=True)
    if r.returncode != 0:
        raise WheelFetchError(f"pip download {' '.join(requirements)} failed: {r.stderr.strip()[-800:]}")
    (tmp / ".complete").write_text("\n".join(requirements) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
