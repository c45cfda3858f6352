"""Namespaces the tool owns: created with ``app.kubernetes.io/managed-by=abtest``.

The tool creates pods in, and deletes pods from, only such namespaces: a namespace that exists
without the label belongs to someone else and is refused, never used or cleaned.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from abtest.cluster.client import REQUEST_TIMEOUT, Cluster, api_call, convert

# the labels' home is abtest.cluster.labels; named here too, where older code imports them
from abtest.cluster.labels import MANAGED_BY as MANAGED_BY
from abtest.cluster.labels import MANAGED_BY_KEY as MANAGED_BY_KEY
from abtest.errors import ClusterError, UserError


class NamespaceNotOwned(UserError):
    """The namespace exists but the tool did not create it."""


def _read(cluster: Cluster, name: str) -> Any | None:
    try:
        return cluster.core.read_namespace(name, _request_timeout=REQUEST_TIMEOUT)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise convert(exc) from exc


def _refuse(name: str, labels: dict[str, str] | None) -> NamespaceNotOwned:
    found = (labels or {}).get(MANAGED_BY_KEY)
    return NamespaceNotOwned(
        f"namespace {name!r} is not owned by abtest "
        f"({MANAGED_BY_KEY}={found!r}, expected {MANAGED_BY!r}); refusing to use or clean it",
        f"namespace {name}",
        "choose another namespace (abtest creates it) or delete this one yourself",
    )


@api_call
def check_owned(cluster: Cluster, name: str) -> None:
    """Raise NamespaceNotOwned unless ``name`` exists and carries the tool's label."""
    ns = _read(cluster, name)
    if ns is None:
        raise ClusterError(f"namespace {name!r} does not exist")
    labels = ns.metadata.labels or {}
    if labels.get(MANAGED_BY_KEY) != MANAGED_BY:
        raise _refuse(name, labels)


@api_call
def ensure_namespace(cluster: Cluster, name: str, timeout_s: float = 120.0) -> bool:
    """Create ``name`` labelled as the tool's own, or check an existing one is. True if created.

    A namespace of ours that is still terminating from an earlier delete is waited for.
    """
    deadline = time.monotonic() + timeout_s
    last = "not read yet"
    while True:
        if time.monotonic() > deadline:
            raise ClusterError(
                f"namespace {name!r} is not usable after waiting {timeout_s:g} s ({last})"
            )
        ns = _read(cluster, name)
        if ns is not None:
            labels = ns.metadata.labels or {}
            if labels.get(MANAGED_BY_KEY) != MANAGED_BY:
                raise _refuse(name, labels)
            if ns.metadata.deletion_timestamp is None:
                return False
            last = "still terminating from an earlier delete"
            time.sleep(0.5)
            continue
        body = client.V1Namespace(
            metadata=client.V1ObjectMeta(name=name, labels={MANAGED_BY_KEY: MANAGED_BY})
        )
        try:
            cluster.core.create_namespace(body, _request_timeout=REQUEST_TIMEOUT)
            return True
        except ApiException as exc:
            if exc.status != 409:
                raise
            # created concurrently, or still being deleted: read it again (and its label)
            last = "create answered 409 Conflict"
            time.sleep(0.5)


@api_call
def delete_namespace(cluster: Cluster, name: str, wait_s: float | None = 120.0) -> None:
    """Delete one of the tool's namespaces and wait until it is gone (refuses any other);
    ``wait_s=None`` returns once the delete is accepted (the namespace controller takes ~5 s
    to finish an empty one, which a caller that will not reuse the name need not wait for)."""
    ns = _read(cluster, name)
    if ns is None:
        return
    if (ns.metadata.labels or {}).get(MANAGED_BY_KEY) != MANAGED_BY:
        raise _refuse(name, ns.metadata.labels)
    try:
        cluster.core.delete_namespace(
            name, grace_period_seconds=0, _request_timeout=REQUEST_TIMEOUT
        )
    except ApiException as exc:
        if exc.status != 404:
            raise
    if wait_s is None:
        return
    deadline = time.monotonic() + wait_s
    while _read(cluster, name) is not None:
        if time.monotonic() > deadline:
            raise ClusterError(f"namespace {name!r} is not gone {wait_s:g} s after its delete")
        time.sleep(0.5)
