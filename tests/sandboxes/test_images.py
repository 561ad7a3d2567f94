"""Offline images: task layers built on the base image with no network, cached by content."""

from __future__ import annotations

import os
import time

import docker
import pytest

from arborl.sandboxes import DEFAULT_IMAGE, ImageBuildError, SandboxSpec
from arborl.sandboxes.images import BaseImageRecipe, build_base_image, build_layer, host_debian_mirror

# per xdist worker: each test below removes (or counts) every image of this repository
TASK_REPO = f"arborl/test-task-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"


def test_base_image_is_cached_by_recipe(docker_backend):
    client = docker_backend.client
    tag = build_base_image(client, BaseImageRecipe())  # exists already: returns at once
    assert client.images.get(tag).id == client.images.get(DEFAULT_IMAGE).id
    assert BaseImageRecipe(packages=("python3",)).tag != BaseImageRecipe().tag
    assert BaseImageRecipe(mirror="http://example.invalid/debian").tag == BaseImageRecipe().tag
    assert BaseImageRecipe(extra_packages=("xvfb",)).tag != BaseImageRecipe().tag


def test_gui_image_has_the_browser_and_desktop_tools(docker_backend):
    """What `arborl sandbox build image=gui` (run by setup) put in the chroot with apt-get."""
    out = docker_backend.client.containers.run(
        "arborl/gui:latest",
        ["sh", "-c", "chromium --version && which Xvfb xdotool openbox socat import"],
        remove=True,
        network_mode="none",
    ).decode()
    assert out.startswith("Chromium ") and out.count("/usr/bin/") == 5


def test_host_mirror_is_a_debian_uri():
    assert host_debian_mirror().rstrip("/").endswith("/debian")


async def test_task_layer_builds_offline_and_is_reused(docker_backend):
    client = docker_backend.client
    context = {
        "repo/lib.py": "def answer():\n    return 42\n",
        "repo/test_lib.py": "from lib import answer\n\ndef test_answer():\n    assert answer() == 42\n",
    }
    steps = "COPY repo /workspace/repo\nRUN chown -R agent:agent /workspace/repo"
    tag = build_layer(client, DEFAULT_IMAGE, steps, context, repository=TASK_REPO)
    try:
        created = client.images.get(tag).attrs["Created"]
        assert build_layer(client, DEFAULT_IMAGE, steps, context, repository=TASK_REPO) == tag
        assert client.images.get(tag).attrs["Created"] == created  # cache hit, no rebuild
        changed = dict(context, **{"repo/lib.py": "def answer():\n    return 41\n"})
        assert build_layer(client, DEFAULT_IMAGE, steps, changed, repository=TASK_REPO) != tag
        async with await docker_backend.create(SandboxSpec(image=tag, workdir="/workspace/repo")) as sb:
            res = await sb.exec("python3 -m pytest -q")
            assert res.ok, res.output
    finally:
        for img in client.images.list(TASK_REPO):
            client.images.remove(img.id, force=True)


def test_a_layer_tag_follows_its_parents_content_not_the_parents_build(docker_backend):
    """Two sandbox nodes on one engine race to build a layer: the tag ends on either build (a
    new image id, Docker builds are not reproducible). The layer on top must get the same tag
    either way, or the nodes disagree on the instance images (seen in CI as 'the sandbox
    nodes built different instance images'). Here the parent is rebuilt under its tag."""
    client = docker_backend.client
    parent_steps, child_steps = "RUN echo parent > /parent.txt", "RUN echo child > /child.txt"
    try:
        parent = build_layer(client, DEFAULT_IMAGE, parent_steps, None, repository=TASK_REPO)
        first_id = client.images.get(parent).id
        child = build_layer(client, parent, child_steps, None, repository=TASK_REPO)
        client.images.remove(child, force=True)
        client.images.remove(parent, force=True)
        time.sleep(1.1)  # a new Created time, hence a new image id
        assert build_layer(client, DEFAULT_IMAGE, parent_steps, None, repository=TASK_REPO) == parent
        assert client.images.get(parent).id != first_id
        assert build_layer(client, parent, child_steps, None, repository=TASK_REPO) == child
    finally:
        for img in client.images.list(TASK_REPO):
            client.images.remove(img.id, force=True)


def test_two_machines_that_each_built_the_base_agree_on_the_layers_above():
    """Two nodes each ran `arborl sandbox build`: debootstrap is not reproducible, so their
    bases have different ids and one recipe label. The layers built on them must be salted by
    the recipe (else a Ray cluster's nodes disagree on every Harbor or SWE image)."""
    from types import SimpleNamespace

    from arborl.sandboxes.images import content_salt

    base = {"arborl.recipe": "39dbd0520711"}
    tags = ["arborl/base:39dbd0520711", "arborl/base:latest"]
    a = SimpleNamespace(id="sha256:aaa", labels=base, tags=tags)
    b = SimpleNamespace(id="sha256:bbb", labels=base, tags=tags)
    assert content_salt(a) == content_salt(b) == "recipe:39dbd0520711"
    # a layer inherits the base's labels: its own content wins
    layer = SimpleNamespace(
        id="sha256:ccc", labels={"arborl.content": "d1e2f3", **base}, tags=["arborl/task:d1e2"]
    )
    assert content_salt(layer) == "d1e2f3"
    assert content_salt(SimpleNamespace(id="sha256:ddd", labels=None, tags=[])) == "sha256:ddd"
    # someone's own image FROM arborl's inherits the labels, not the content: its id names it
    theirs = SimpleNamespace(
        id="sha256:eee", labels={"arborl.content": "d1e2f3", **base}, tags=["mine:latest"]
    )
    assert content_salt(theirs) == "sha256:eee"


def test_layer_build_has_no_network_and_reports_failure(docker_backend):
    steps = "RUN python3 -c \"import socket; socket.create_connection(('172.17.0.1', 9), timeout=2)\""
    with pytest.raises(ImageBuildError, match=r"unreachable|refused|timed out|Network"):
        build_layer(docker_backend.client, DEFAULT_IMAGE, steps, None, repository=TASK_REPO)
    assert not docker.from_env().images.list(TASK_REPO)
