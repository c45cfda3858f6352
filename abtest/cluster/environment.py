"""What the cluster says about itself: API server version, the node's software and size."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from abtest.cluster.client import REQUEST_TIMEOUT, Cluster, api_call


@api_call
def server_version(cluster: Cluster) -> dict[str, Any]:
    info = client.VersionApi(cluster.api_client).get_code(_request_timeout=REQUEST_TIMEOUT)
    return {
        "git_version": info.git_version,
        "platform": info.platform,
        "go_version": info.go_version,
    }


@api_call
def node_facts(cluster: Cluster, node_name: str) -> dict[str, Any]:
    """Node name, kernel, OS, kubelet and runtime versions, capacity and allocatable."""
    node: Any = cluster.core.read_node(node_name, _request_timeout=REQUEST_TIMEOUT)
    info = node.status.node_info
    return {
        "node_name": node.metadata.name,
        "kernel": info.kernel_version,
        "os_image": info.os_image,
        "architecture": info.architecture,
        "kubelet_version": info.kubelet_version,
        "container_runtime": info.container_runtime_version,
        "boot_id": info.boot_id,
        "capacity": dict(node.status.capacity or {}),
        "allocatable": dict(node.status.allocatable or {}),
        "labels": dict(node.metadata.labels or {}),
    }
