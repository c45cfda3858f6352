"""RuntimeClass objects (node.k8s.io/v1): which runtime handler a runtimeClassName names."""

from __future__ import annotations

from kubernetes import client

from abtest.cluster.client import REQUEST_TIMEOUT, Cluster, NotFound, api_call


@api_call
def _read(cluster: Cluster, name: str) -> client.V1RuntimeClass:
    api = client.NodeV1Api(cluster.api_client)
    return api.read_runtime_class(name, _request_timeout=REQUEST_TIMEOUT)


def runtime_class_handler(cluster: Cluster, name: str) -> str | None:
    """The handler of RuntimeClass ``name``; None when the cluster has no such RuntimeClass."""
    try:
        rc = _read(cluster, name)
    except NotFound:
        return None
    return str(rc.handler)
