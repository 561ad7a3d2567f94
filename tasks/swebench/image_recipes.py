"""Instance images as layer recipes: plain data here, built elsewhere (offline, cached).

    base image (arborl/base: Debian, python3, pytest, git)
      └─ environment layer, one per (repo, version): the environment's files and install
         commands, and the repository's git bundle            ← shared by its instances
           └─ instance layer, one per instance: the repository cloned from the bundle,
              checked out at base_commit, later history removed  ← thin (the checkout)

A recipe is Dockerfile lines plus a build context. `build_instance_image` takes the function
that builds a layer (`build(parent_tag, layer) -> tag`), so this module stays free of Docker
and of the sandbox layer (`arborl.envs.code.instance_images` passes `arborl.sandboxes.images.build_layer`,
which builds with no network and tags by content hash, so equal layers are built once).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .instance import ENV_ROOT, REPO_ROOT, SWEEnvironment, SWEInstance
from .wheels import UNPACK_WHEELS

WORKSPACE = "/workspace"
AGENT_USER = "agent"


@dataclass(frozen=True)
class Layer:
    """One image layer: Dockerfile instructions over a build context."""

    name: str
    instructions: str
    context: Mapping[str, bytes | str] = field(default_factory=dict)


LayerBuilder = Callable[[str, Layer], str]


def _label(**labels: str) -> str:
    return "LABEL " + " ".join(f"{k}={shlex.quote(v) if v else chr(34) * 2}" for k, v in labels.items())


def bundle_path(repo: str) -> str:
    return f"{REPO_ROOT}/{repo.replace('/', '__')}.bundle"


def environment_layer(
    environment: SWEEnvironment, repo: str, bundle: bytes, wheels: Mapping[str, bytes] | None = None
) -> Layer:
    """The (repo, version) layer: dependencies installed, the repository's history on disk.

    `wheels` (file name → bytes) are the environment's `pip` requirements, fetched on the host
    (`arborl.tasks.swebench.wheels.fetch_wheels`); they are unpacked before the install commands run.
    """
    context: dict[str, bytes | str] = {f"env/{p}": text for p, text in environment.files.items()}
    context["repo.bundle"] = bundle
    script = "set -e\n" + "".join(f"{cmd}\n" for cmd in environment.install)
    context["install.sh"] = script
    lines = []
    if environment.pip and not wheels:
        raise ValueError(f"environment {repo} {environment.version}: pip requirements need their wheels")
    if wheels:
        context.update({f"wheels/{name}": data for name, data in sorted(wheels.items())})
        context["unpack_wheels.py"] = UNPACK_WHEELS
        lines += [
            "COPY wheels/ /tmp/arborl-wheels/",
            "COPY unpack_wheels.py /tmp/arborl-unpack-wheels.py",
            "RUN python3 /tmp/arborl-unpack-wheels.py /tmp/arborl-wheels "
            "&& rm -rf /tmp/arborl-wheels /tmp/arborl-unpack-wheels.py",
        ]
    if environment.files:
        lines.append(f"COPY env/ {ENV_ROOT}/")
    lines += [
        f"COPY repo.bundle {bundle_path(repo)}",
        f"COPY install.sh {ENV_ROOT}/.install.sh",
        f"RUN mkdir -p {ENV_ROOT} && cd {ENV_ROOT} && sh .install.sh",
        _label(**{"arborl.swe.repo": repo, "arborl.swe.version": environment.version}),
    ]
    return Layer(f"environment {repo} {environment.version}".strip(), "\n".join(lines), context)


def instance_layer(instance: SWEInstance, environment: SWEEnvironment) -> Layer:
    """The repository at base_commit in /workspace, with no history after it.

    Every ref but `main` (at base_commit) is deleted and unreachable objects pruned, so the
    fix and anything later cannot be read from `.git`.
    """
    steps = [
        # /workspace belongs to the agent user; git refuses to work in it as root without this.
        "export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'",
        f"git clone -q --no-checkout {bundle_path(instance.repo)} {WORKSPACE}",
        f"cd {WORKSPACE}",
        f"git checkout -q -B main {instance.base_commit}",
        "git remote remove origin",
        "git for-each-ref --format='%(refname)' | grep -vx refs/heads/main | xargs -r -n1 git update-ref -d",
        "git reflog expire --expire=now --all",
        "git gc -q --prune=now",
        *environment.instance_install,
        f"(chown -R {AGENT_USER}: {WORKSPACE} 2>/dev/null || true)",
    ]
    lines = [
        "RUN " + " && ".join(steps),
        _label(
            **{"arborl.swe.instance": instance.instance_id, "arborl.swe.base_commit": instance.base_commit}
        ),
    ]
    return Layer(f"instance {instance.instance_id}", "\n".join(lines))


def build_instance_image(
    instance: SWEInstance,
    environment: SWEEnvironment,
    bundle: bytes,
    build: LayerBuilder,
    base: str,
    wheels: Mapping[str, bytes] | None = None,
) -> str:
    """Build (or find) the instance's image on `base`; returns its tag."""
    env_tag = build(base, environment_layer(environment, instance.repo, bundle, wheels))
    return build(env_tag, instance_layer(instance, environment))
