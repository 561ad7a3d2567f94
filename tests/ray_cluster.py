"""A Ray cluster of several nodes in this process (`ray.cluster_utils.Cluster`: one raylet
and object store per node), each offering sandboxes, for the `RaySandboxPool` tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

RES = "arborl_sandbox"  # RayPoolConfig.node_resource's default
NODE_ARGS: dict[str, Any] = {"num_cpus": 1, "resources": {RES: 1}, "object_store_memory": 80 * 2**20}
# A lost node is noticed in about 2 s instead of Ray's default 15 s.
FAST_HEALTH = {
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 4,
    "health_check_timeout_ms": 500,
}


@contextmanager
def ray_cluster(nodes: int, head_offers: bool = True) -> Iterator[Any]:
    """`nodes` nodes (the head is one), with this process connected as the driver (on the
    head); each offers sandboxes, the head only if `head_offers` (then every sandbox is on a
    node other than the driver's, as on a cluster whose driver host runs none)."""
    import ray
    from ray.cluster_utils import Cluster

    head = NODE_ARGS if head_offers else {**NODE_ARGS, "resources": {}}
    cluster = Cluster(initialize_head=True, head_node_args={**head, "_system_config": FAST_HEALTH})
    try:
        for _ in range(nodes - 1):
            cluster.add_node(**NODE_ARGS)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
