"""Sandbox images without a registry.

- The base image is made offline: `debootstrap --variant=minbase` of Debian with Python,
  pytest and git, a non-root `agent` user and a /workspace, then `docker import`. Its tag is
  a hash of the recipe, so it is rebuilt only when the recipe changes.
- Task images are layered on it with `docker build` (no network during the build), tagged by
  the hash of the parent (its content label if arborl built it, else its image id) +
  Dockerfile + context, so identical tasks share one image, many instances share the base
  layers, and engines holding the same base agree on every tag.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .errors import ImageBuildError, SandboxUnavailable

BUILD_VERSION = 1  # bump when the build procedure itself changes
DEFAULT_MIRROR = "http://deb.debian.org/debian"
CONTENT_LABEL = "arborl.content"  # a built layer's content digest (its parents' included)
RECIPE_LABEL = "arborl.recipe"  # the base image's recipe digest


class BaseImageRecipe(BaseModel):
    """What goes into the base image (`sandbox.image` in the Hydra config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repository: str = "arborl/base"
    suite: str = "bookworm"
    packages: tuple[str, ...] = ("python3", "python3-pytest", "git", "patch", "procps")
    extra_packages: tuple[str, ...] = Field(
        (),
        description="installed with apt-get inside the chroot after debootstrap (large sets with "
        "alternatives, e.g. chromium or xvfb, make debootstrap's --include fail)",
    )
    user: str = "agent"
    uid: int = 1000
    mirror: str | None = Field(None, description="Debian mirror; default: the host's apt source")

    def digest(self) -> str:
        # An empty extra_packages is left out so base-image tags predating the field still hold.
        skip = {"mirror"} | (set() if self.extra_packages else {"extra_packages"})
        payload = self.model_dump(exclude=skip) | {"build_version": BUILD_VERSION}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def tag(self) -> str:
        return f"{self.repository}:{self.digest()}"


def host_debian_mirror() -> str:
    """The Debian mirror this host's apt uses (deb822 or one-line sources)."""
    candidates = [*sorted(Path("/etc/apt/sources.list.d").glob("*.sources")), Path("/etc/apt/sources.list")]
    for path in candidates:
        try:
            text = path.read_text()
        except OSError:
            continue
        for m in re.finditer(r"^\s*(?:URIs:\s*|deb\s+(?:\[[^\]]*\]\s*)?)(\S+)", text, re.M):
            uri = m.group(1)
            if re.search(r"/debian/?$", uri):
                return uri
    return DEFAULT_MIRROR


def image_exists(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def _run(cmd: list[str], log: Callable[[str], None], logfile: Path) -> None:
    with logfile.open("ab") as f:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        for line in proc.stdout:
            f.write(line)
            log(line.decode(errors="replace").rstrip())
        if proc.wait() != 0:
            tail = logfile.read_text(errors="replace")[-3000:]
            raise ImageBuildError(
                f"{' '.join(cmd[:3])} ... failed (exit {proc.returncode}); log {logfile}:\n{tail}"
            )


def build_base_image(
    client: Any,
    recipe: BaseImageRecipe | None = None,
    force: bool = False,
    log: Callable[[str], None] = lambda line: None,
) -> str:
    """Build (or find) the base image; returns its tag and also tags `<repository>:latest`."""
    recipe = recipe or BaseImageRecipe()
    tag = recipe.tag
    if image_exists(client, tag) and not force:
        client.images.get(tag).tag(recipe.repository, "latest")
        return tag
    if os.getuid() != 0:
        raise SandboxUnavailable("building the base image needs root (debootstrap and chroot)")
    if not shutil.which("debootstrap"):
        raise SandboxUnavailable("debootstrap is missing: apt-get install debootstrap")
    work = Path(tempfile.mkdtemp(prefix="arborl-rootfs-", dir="/var/tmp"))
    rootfs, logfile = work / "rootfs", work / "build.log"
    try:
        log(f"debootstrap {recipe.suite} with {', '.join(recipe.packages)} (about a minute)")
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(recipe.packages)}",
                recipe.suite,
                str(rootfs),
                recipe.mirror or host_debian_mirror(),
            ],
            log,
            logfile,
        )
        if recipe.extra_packages:
            log(f"apt-get install {', '.join(recipe.extra_packages)} in the chroot (a few minutes)")
            _chroot_apt_install(rootfs, recipe.extra_packages, log, logfile)
        user_setup = (
            f"useradd -m -u {recipe.uid} -s /bin/bash {recipe.user} && "
            f"install -d -o {recipe.user} -g {recipe.user} /workspace && "
            "apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin"
        )
        _run(["chroot", str(rootfs), "/bin/sh", "-c", user_setup], log, logfile)
        log(f"docker import -> {tag}")
        tar = subprocess.Popen(
            ["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE
        )
        changes = [
            "ENV LANG=C.UTF-8",
            "WORKDIR /workspace",
            'CMD ["/bin/bash"]',
            f'LABEL {RECIPE_LABEL}="{recipe.digest()}"',
        ]
        repo, _, version = tag.partition(":")
        client.api.import_image(
            src=tar.stdout, repository=repo, tag=version, changes=changes, stream_src=True
        )
        if tar.wait() != 0:
            raise ImageBuildError("tar of the root filesystem failed")
        client.images.get(tag).tag(recipe.repository, "latest")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tag


def _chroot_apt_install(
    rootfs: Path, packages: tuple[str, ...], log: Callable[[str], None], logfile: Path
) -> None:
    """`apt-get install --no-install-recommends` in the chroot, with /proc mounted meanwhile.

    The chroot reaches the Debian mirror as the host does (given the host's resolver
    config). A half-configured tree (postinst scripts that want a running system)
    is repaired with `apt-get --fix-broken install`, which is what works for chromium.
    """
    (rootfs / "etc/apt/apt.conf.d/99arborl").write_text(
        'Acquire::Check-Valid-Until "false";\nAPT::Install-Recommends "false";\n'
    )
    shutil.copyfile("/etc/resolv.conf", rootfs / "etc/resolv.conf")
    proc = rootfs / "proc"
    subprocess.run(["mount", "-t", "proc", "proc", str(proc)], check=True)
    try:
        script = (
            "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && "
            f"(apt-get install -y -q {' '.join(packages)} || apt-get --fix-broken install -y -q) && "
            f"dpkg -s {' '.join(p.split('=')[0] for p in packages)} >/dev/null"
        )
        _run(["chroot", str(rootfs), "/bin/sh", "-c", script], log, logfile)
    finally:
        subprocess.run(["umount", "-l", str(proc)], check=False)


def _context_tar(
    dockerfile: str, context: Path | Mapping[str, bytes | str] | None, salt: str = ""
) -> tuple[bytes, str]:
    """A build-context tar and the content hash of everything in it (plus `salt`)."""
    digest = hashlib.sha256(salt.encode() + b"\0" + dockerfile.encode())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        files: list[tuple[str, bytes]] = [("Dockerfile", dockerfile.encode())]
        if isinstance(context, Path):
            for p in sorted(context.rglob("*")):
                if p.is_file():
                    files.append((str(p.relative_to(context)), p.read_bytes()))
        elif context:
            files += [(k, v.encode() if isinstance(v, str) else v) for k, v in sorted(context.items())]
        for name, data in files:
            digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue(), digest.hexdigest()


def content_salt(image: Any) -> str:
    """What names `image` (a docker-py Image) in the tags of the layers built on it: its
    content digest if arborl built it as a layer, its recipe's digest if it is arborl's base,
    else its image id. Docker builds are not reproducible, and neither is a debootstrap: two
    builders racing on one layer (two sandbox nodes on one engine), or two machines that each
    built the base, hold different ids for the same content, and an id salt gave their
    children different tags.

    A label names the image only on the image arborl built under it (a tag whose version is the
    label's start): an image built by someone else FROM one of arborl's inherits its labels, and
    salting its children by them would hand them a layer built on the other image."""
    labels = image.labels or {}
    versions = [t.rsplit(":", 1)[-1] for t in getattr(image, "tags", None) or [] if ":" in t]
    for key, prefix in ((CONTENT_LABEL, ""), (RECIPE_LABEL, "recipe:")):
        value = str(labels.get(key) or "")
        if value and any(v and value.startswith(v) for v in versions):
            return prefix + value
    return str(image.id)


def build_layer(
    client: Any,
    base: str,
    instructions: str,
    context: Path | Mapping[str, bytes | str] | None = None,
    repository: str = "arborl/task",
    network: bool = False,
) -> str:
    """Build `FROM base` + `instructions` (Dockerfile lines) over `context`; cached by content.

    Returns the tag `repository:<hash>`; an image with that tag is reused as is.
    """
    import docker.errors

    try:
        parent = client.images.get(base)
    except docker.errors.ImageNotFound as e:
        raise SandboxUnavailable(f"base image {base!r} is missing: run `arborl sandbox build`") from e
    salt = content_salt(parent)
    dockerfile = f"FROM {base}\n{instructions.strip()}\n"
    data, digest = _context_tar(dockerfile, context, salt=salt)
    tag = f"{repository}:{digest[:16]}"
    if image_exists(client, tag):
        return tag
    try:
        client.images.build(
            fileobj=io.BytesIO(data),
            custom_context=True,
            tag=tag,
            rm=True,
            forcerm=True,
            network_mode="bridge" if network else "none",
            labels={CONTENT_LABEL: digest},
        )
    except docker.errors.BuildError as e:
        lines = [str(c.get("stream") or c.get("error") or "") for c in e.build_log if isinstance(c, dict)]
        raise ImageBuildError(f"building {tag} failed: {e.msg}\n{''.join(lines)[-3000:]}") from e
    return tag
