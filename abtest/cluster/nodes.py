"""What the API server knows about a node: readiness and heartbeat, kubelet version, and
the running kubelet's own view through the node proxy (``/configz``, the
``kubernetes_feature_enabled`` metric). Parsers are pure functions."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes import client

from abtest.cluster.client import Cluster, api_call, node_proxy_get
from abtest.errors import ClusterError

FEATURE_METRIC = "kubernetes_feature_enabled"
_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)"
    r"(?:\{(?P<labels>.*)\})?"
    r"\s+(?P<value>\S+)(?:\s+-?[0-9]+)?\s*$"
)
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True)
class NodeStatus:
    name: str
    ready: bool | None  # None: no Ready condition (or status Unknown)
    reason: str
    message: str
    heartbeat: datetime | None  # Ready condition's lastHeartbeatTime (1 s resolution)
    transition: datetime | None
    kubelet_version: str


@api_call
def node_names(cluster: Cluster, timeout: float = 10.0) -> list[str]:
    """The names of every Node object the API server has."""
    nodes: Any = cluster.core.list_node(_request_timeout=timeout)
    return [str(n.metadata.name) for n in nodes.items]


@api_call
def lease_renewed(cluster: Cluster, name: str, timeout: float = 10.0) -> float | None:
    """When the node's kubelet last renewed its Lease in ``kube-node-lease``: a Unix time in
    microseconds on the kubelet's own clock (the Ready heartbeat has only 1 s resolution).
    None when the node has no lease."""
    api = client.CoordinationV1Api(cluster.api_client)
    lease: Any = api.read_namespaced_lease(name, "kube-node-lease", _request_timeout=timeout)
    renew = lease.spec.renew_time if lease.spec else None
    return renew.timestamp() if renew else None


@api_call
def node_allocatable(cluster: Cluster, name: str, timeout: float = 10.0) -> dict[str, str]:
    """The node's allocatable resources as the API server has them (``cpu``, ``memory``, ...)."""
    node: Any = cluster.core.read_node(name, _request_timeout=timeout)
    return {str(k): str(v) for k, v in (node.status.allocatable or {}).items()}


@api_call
def node_status(cluster: Cluster, name: str, timeout: float = 10.0) -> NodeStatus:
    node: Any = cluster.core.read_node(name, _request_timeout=timeout)
    status = node.status
    ready: bool | None = None
    reason = message = ""
    heartbeat = transition = None
    for cond in status.conditions or ():
        if cond.type == "Ready":
            ready = {"True": True, "False": False}.get(cond.status)
            reason = cond.reason or ""
            message = cond.message or ""
            heartbeat = cond.last_heartbeat_time
            transition = cond.last_transition_time
    info = status.node_info
    return NodeStatus(
        name=name,
        ready=ready,
        reason=reason,
        message=message,
        heartbeat=heartbeat,
        transition=transition,
        kubelet_version=str(info.kubelet_version) if info else "",
    )


def parse_configz(text: str) -> dict[str, Any]:
    """The ``kubeletconfig`` object of a ``/configz`` answer."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClusterError(f"/configz is not JSON: {exc}; starts {text[:120]!r}") from None
    config = data.get("kubeletconfig") if isinstance(data, dict) else None
    if not isinstance(config, dict):
        raise ClusterError(f"/configz has no kubeletconfig object; starts {text[:120]!r}")
    return config


def parse_feature_enabled(text: str) -> dict[str, bool]:
    """Gate name -> enabled, from Prometheus text with ``kubernetes_feature_enabled``."""
    gates: dict[str, bool] = {}
    for line in text.splitlines():
        if not line.startswith(FEATURE_METRIC):
            continue
        m = _SAMPLE.match(line)
        if not m or m.group("name") != FEATURE_METRIC:
            continue
        labels = dict(_LABEL.findall(m.group("labels") or ""))
        gate = labels.get("name")
        if not gate:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        gates[gate] = value != 0.0
    return gates


def configz(cluster: Cluster, name: str, timeout: float = 10.0) -> dict[str, Any]:
    """The running kubelet's configuration (``/configz`` through the node proxy)."""
    return parse_configz(node_proxy_get(cluster, name, "configz", timeout=timeout))


def feature_enabled(cluster: Cluster, name: str, timeout: float = 10.0) -> dict[str, bool]:
    """Every gate the running kubelet knows, with whether it is enabled (its metrics)."""
    gates = parse_feature_enabled(node_proxy_get(cluster, name, "metrics", timeout=timeout))
    if not gates:
        raise ClusterError(f"node {name}: no {FEATURE_METRIC} samples in the kubelet's /metrics")
    return gates
