"""Build SWE instance images on Docker and switch SWE tasks over to them.

The layer recipes are `arborl.tasks.swebench.image_recipes`; this module builds them with
`arborl.sandboxes.images.build_layer` (no network, tagged by content hash: a layer that
exists is not rebuilt, and instances of one repository and version share their environment
layer). Repositories come from git bundles or checkouts found in `repos_dirs`
(`<owner>__<name>.bundle`, a bare mirror `<owner>__<name>.git`, or a checkout
`<owner>__<name>/.git`), then from the built-in suites' bundles (swe-mini, swe-real).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from arborl.sandboxes import DEFAULT_IMAGE, DockerBackend, SandboxBackend
from arborl.sandboxes.images import build_layer
from arborl.tasks import Task
from arborl.tasks.swebench import Layer, LayerBuilder, build_instance_image, swe_parts, to_code_task
from arborl.tasks.swebench.bundles import BUILTIN_REPOS
from arborl.tasks.swebench.repos import RepositoryNotFound, find_repository
from arborl.tasks.swebench.wheels import fetch_wheels

__all__ = ["REPOSITORY", "docker_builder", "find_bundle", "instance_image", "with_instance_images"]

REPOSITORY = "arborl/swe"


def find_bundle(repo: str, repos_dirs: Sequence[str | Path] = ()) -> bytes:
    """The git bundle of `repo` ('owner/name') from a .bundle file, a bare mirror or a checkout
    in `repos_dirs` (see `arborl.tasks.swebench.repos`), then the built-in suites' bundles."""
    try:
        return find_repository(repo, [*repos_dirs, *BUILTIN_REPOS]).bundle()
    except RepositoryNotFound as e:
        raise RepositoryNotFound(f"{e} (set swe.repos_dir)") from None


def docker_builder(client: Any) -> LayerBuilder:
    def build(parent: str, layer: Layer) -> str:
        return build_layer(client, parent, layer.instructions, layer.context, repository=REPOSITORY)

    return build


def instance_image(
    task: Task, client: Any, repos_dirs: Sequence[str | Path] = (), base: str = DEFAULT_IMAGE
) -> str:
    """Build (or find) the image of one SWE task (blocking: Docker builds)."""
    parts = swe_parts(task)
    if parts is None:
        raise ValueError(f"{task.id} is not a SWE task")
    instance, environment = parts
    return build_instance_image(
        instance,
        environment,
        find_bundle(instance.repo, repos_dirs),
        docker_builder(client),
        base,
        wheels=fetch_wheels(environment.pip),
    )


async def with_instance_images(
    tasks: Sequence[Task],
    backend: SandboxBackend,
    repos_dirs: Sequence[str | Path] = (),
    on_built: Callable[[Task, str], None] | None = None,
) -> list[Task]:
    """`tasks` with every SWE task running on its instance image (Docker backends only;
    other backends get the tasks back unchanged). Builds run one at a time in a thread."""
    if not isinstance(backend, DockerBackend):
        return list(tasks)
    out: list[Task] = []
    for task in tasks:
        parts = swe_parts(task)
        if parts is None:
            out.append(task)
            continue
        tag = await asyncio.to_thread(instance_image, task, backend.client, repos_dirs)
        instance, environment = parts
        meta = {k: v for k, v in task.metadata.items() if k != "swe"}
        out.append(to_code_task(instance, environment, image=tag, metadata={**meta, "image": tag}))
        if on_built is not None:
            on_built(task, tag)
    return out
