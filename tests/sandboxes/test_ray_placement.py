"""Where `RaySandboxPool` places an acquire when the nodes hold different images.

Every Ray node on this machine shares its one Docker engine, so nodes that differ in images
are stood in for by node actors that answer for their own images (`FakeNode`): what is
tested is the pool's placement, on its real code, given each node's answer. The answer
itself is tested on the real engine (`test_docker_backend_knows_its_images`)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from arborl.sandboxes import DEFAULT_IMAGE, PoolTimeout, SandboxSpec
from arborl.sandboxes.ray import RayPoolConfig
from arborl.sandboxes.ray.pool import NodeState, RaySandboxPool

SWE = SandboxSpec(image="arborl/swe:instance-1")
_ids = itertools.count()


class _Method:
    def __init__(self, fn: Any) -> None:
        self.remote = fn


class FakeNode:
    """A node actor's answers, from the images it holds."""

    def __init__(self, images: set[str]) -> None:
        self.images = images
        self.checkout = _Method(self._checkout)
        self.checkin = _Method(self._nothing)
        self.has_image = _Method(self._has_image)
        self.with_backend = _Method(self._with_backend)

    async def _checkout(self, spec: SandboxSpec, timeout: float) -> tuple[str, str]:
        return f"lease-{next(_ids)}", f"sb-{next(_ids)}"

    async def _nothing(self, *args: Any) -> None:
        return None

    async def _has_image(self, image: str) -> bool:
        return image in self.images

    async def _with_backend(self, fn: Any, args: tuple[Any, ...]) -> Any:
        return fn(self, *args)


def build(node: FakeNode, image: str) -> None:  # what on_each_node runs (e.g. an image build)
    node.images.add(image)


def pool_of(**nodes: tuple[FakeNode, int]) -> RaySandboxPool:
    pool = RaySandboxPool(RayPoolConfig(prefer_own_node=False, revive_interval_s=0.05))
    pool._starting = asyncio.get_running_loop().create_future()
    pool._starting.set_result(None)  # the nodes below are the cluster
    pool.nodes = {name: NodeState(name, actor, name, capacity) for name, (actor, capacity) in nodes.items()}
    return pool


async def test_acquires_go_to_the_nodes_that_hold_the_spec_image():
    holder, bare = FakeNode({SWE.image}), FakeNode(set())
    pool = pool_of(holder=(holder, 2), bare=(bare, 8))  # most room is on the node without it
    first = [await pool.checkout(SWE) for _ in range(2)]
    assert [sb.node_id for sb in first] == ["holder", "holder"]
    with pytest.raises(PoolTimeout):  # the holder is full: wait for it, never the bare node
        await pool.checkout(SWE, timeout=0.3)
    pool.checkin(first[0])
    assert (await pool.checkout(SWE)).node_id == "holder"


async def test_an_image_no_node_holds_is_placed_by_room_and_looked_for_again():
    small, big = FakeNode(set()), FakeNode(set())
    pool = pool_of(small=(small, 4), big=(big, 8))
    # nobody holds it: most room (that node's own error will name the missing image)
    assert (await pool.checkout(SWE)).node_id == "big"
    small.images.add(SWE.image)  # loaded on one node by hand: the next acquire asks again
    assert (await pool.checkout(SWE)).node_id == "small"


async def test_images_built_through_the_pool_are_placed_on_at_once():
    small, big = FakeNode({SWE.image}), FakeNode(set())
    pool = pool_of(small=(small, 4), big=(big, 8))
    assert (await pool.checkout(SWE)).node_id == "small"  # the only holder (remembered)
    await pool.on_each_node(build, SWE.image)  # e.g. a SWE eval building its images everywhere
    assert (await pool.checkout(SWE)).node_id == "big"  # now by room


async def test_a_spec_of_the_base_image_runs_on_every_node_holding_it():
    a, b = FakeNode({DEFAULT_IMAGE}), FakeNode({DEFAULT_IMAGE})
    pool = pool_of(a=(a, 1), b=(b, 1))
    nodes = {(await pool.checkout(SandboxSpec())).node_id for _ in range(2)}
    assert nodes == {"a", "b"}


@pytest.mark.docker
def test_docker_backend_knows_its_images(docker_backend):
    assert docker_backend.has_image(DEFAULT_IMAGE)
    assert not docker_backend.has_image("arborl/no-such-image:0")
