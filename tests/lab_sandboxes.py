"""The lab node's sandbox count once it has settled (the lab-tier cleanup tests share it)."""

from __future__ import annotations

import time

from abtest.cluster.client import Cluster
from abtest.node.session import NodeSession

SETTLE_TIMEOUT_S = 180.0


def settled_sandbox_count(cluster: Cluster, node: NodeSession, node_name: str) -> int:
    """The node's sandbox count once every sandbox belongs to a pod the API still has.

    An earlier test's deleted pods leave stopped sandboxes that the kubelet's sandbox GC
    removes about a minute later; counted into this test's baseline, they vanish mid-test
    and the node reads "cleaner" than before (seen in CI: baseline 3, after 0)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        pods = cluster.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node_name}", _request_timeout=30
        ).items
        count = node.sandbox_count()
        if count <= len(pods) or time.monotonic() > deadline:
            return count
        time.sleep(5)
