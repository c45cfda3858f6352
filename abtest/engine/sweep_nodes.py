"""What a sweep needs of a node and its API server, behind one seam.

:class:`NodeKit` is what :class:`~abtest.engine.node_sweep.NodeSweep` is given: the cluster
client, the pre-flight, the node controller (apply / restore, always undoable), the node
session the batch engine asks about sandboxes, and one batch round. :class:`RealNodes` is
the default and reaches real nodes over SSH and the real API server; the test package ships
a scripted fake node (``abtest.testing.FakeKit``) so the sweep's orchestration (visits, resume,
failed arms, signals across worker threads) is tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, NotRequired, Protocol, Self, TypedDict, Unpack

from abtest.batch.round import run_round
from abtest.batch.round_records import RoundResult
from abtest.batch.run_record import probe_environment
from abtest.batch.spec import RoundSpec
from abtest.batch.template import round_selector
from abtest.cluster.client import Cluster, Forbidden, connect
from abtest.cluster.environment import server_version
from abtest.cluster.namespaces import NamespaceNotOwned, check_owned, ensure_namespace
from abtest.cluster.nodes import node_allocatable, node_names, node_status
from abtest.cluster.pods import count_pods, list_pods
from abtest.cluster.runtimeclasses import runtime_class_handler
from abtest.config.build_names import BuildName
from abtest.config.domain import Scalar
from abtest.config.playbook import NodeProfile
from abtest.engine.build_placing import placement_problems
from abtest.engine.round_fit import round_fit_problems
from abtest.errors import ClusterError, NodeError
from abtest.lab import api_proxy
from abtest.node.binary import KubeletBinary
from abtest.node.control import NodeController
from abtest.node.kubelet_build import KubeletBuild, read_build
from abtest.node.preflight import check as preflight_check
from abtest.node.records import ApplyRecord, RestoreRecord
from abtest.node.session import NodeSession
from abtest.process.stop import SignalGuard
from abtest.store.db import Store
from abtest.store.journal import Journal

Progress = Callable[[str], None]


@dataclass(frozen=True)
class PreflightSpec:
    """What one node's pre-flight checks, as one value (the protocol, the real kit and the
    fakes take this, so its parameters are written once): ``profile``'s node passes
    :func:`abtest.node.preflight.check` for ``settings`` (the arms the node's own kubelet runs)
    and ``image``; each of ``binaries`` (other arms' kubelet builds) is on the node; and
    ``namespace`` is abtest's, with no pods in it. ``accept_new_host_key``: trust the node's
    SSH host key on first contact."""

    profile: NodeProfile
    settings: Mapping[str, Scalar]
    binaries: tuple[str, ...]
    image: str
    namespace: str
    accept_new_host_key: bool = False
    #: the largest round's pod count and each pod's requests (``cpu``, ``memory``): checked
    #: against the node's allocatable (0: not checked)
    pods: int = 0
    requests: Mapping[str, str] = field(default_factory=dict)
    #: the builds the arms name: placed on the node first when the profile lets abtest
    #: (kubelet.place_builds), under the node lock, before anything is read or changed
    builds: tuple[BuildName, ...] = ()
    #: where placement says what it uploads
    say: Callable[[str], None] = print


class ControllerTerms(TypedDict):
    """How a sweep opens a node's controller (:class:`~abtest.node.control.NodeController`
    says each); every change it journals is recorded as ``run_id``'s."""

    accept_new_host_key: bool
    break_lock: bool
    progress: Progress
    run_id: NotRequired[str | None]


class WithBlock(Protocol):
    """Used as ``with x as y:``: ``y`` is ``x``, closed at the block's end."""

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class NodeControl(WithBlock, Protocol):
    """The part of :class:`~abtest.node.control.NodeController` a sweep uses."""

    guard: SignalGuard

    def apply(
        self, settings: Mapping[str, Scalar], *, check_known: bool = ..., force_restart: bool = ...
    ) -> ApplyRecord: ...

    def restore(self) -> RestoreRecord: ...

    def has_pending_change(self) -> bool: ...

    def install_kubelet_binary(self, candidate: str | None) -> str: ...


class NodeAccess(WithBlock, Protocol):
    """The part of :class:`~abtest.node.session.NodeSession` the batch engine uses."""

    def sandbox_count(self) -> int: ...

    def remove_stopped_sandboxes(self, namespace: str) -> int: ...

    def runtime_handlers(self) -> frozenset[str] | None: ...

    def round_handlers(self, namespace: str, round_tag: str) -> dict[str, str] | None: ...

    def container_starts(self, namespace: str) -> dict[str, int] | None: ...

    def clean_round_sandboxes(self, namespace: str, round_tag: str) -> int: ...


class NodeKit(Protocol):
    """Everything a sweep reaches a node and its API server through."""

    def cluster(self, profile: NodeProfile, *, pool_size: int) -> Cluster: ...

    def environment(self, profile: NodeProfile) -> dict[str, Any]: ...

    def cluster_nodes(self, profile: NodeProfile) -> list[str] | None: ...

    def preflight(self, cluster: Cluster, spec: PreflightSpec, store: Store) -> list[str]: ...

    def ensure_namespace(self, cluster: Cluster, namespace: str) -> None: ...

    def kubelet_builds(
        self, profile: NodeProfile, paths: list[str]
    ) -> dict[str, KubeletBuild | None]: ...

    def api_server_version(self, cluster: Cluster) -> str | None: ...

    def kubelet_version(self, cluster: Cluster, node_name: str) -> str: ...

    def runtime_class_handler(self, cluster: Cluster, name: str) -> str | None: ...

    def round_pods(
        self, cluster: Cluster, namespace: str, round_tag: str
    ) -> list[dict[str, Any]]: ...

    def controller(
        self, profile: NodeProfile, store: Store, **terms: Unpack[ControllerTerms]
    ) -> NodeControl: ...

    def session(self, profile: NodeProfile) -> NodeAccess: ...

    def run_round(self, cluster: Cluster, spec: RoundSpec) -> RoundResult: ...


class RealNodes:
    """Real nodes over SSH, the real API server (the default)."""

    def cluster(self, profile: NodeProfile, *, pool_size: int) -> Cluster:
        return connect(profile.kubeconfig, context=profile.kube_context, pool_size=pool_size)

    def cluster_nodes(self, profile: NodeProfile) -> list[str] | None:
        """The nodes of the profile's cluster (read only: the fleet checks run first); None
        when these credentials may not list nodes (the pre-flight only gets its own)."""
        try:
            return node_names(connect(profile.kubeconfig, context=profile.kube_context))
        except Forbidden:
            return None

    def environment(self, profile: NodeProfile) -> dict[str, Any]:
        env = probe_environment(
            connect(profile.kubeconfig, context=profile.kube_context), profile.node_name
        )
        # how abtest reached the node (the report's Method says it)
        env["transport"] = profile.reached_by
        # a lab node's kubelet path through the latency proxy (`lab up --api-latency`)
        return env | api_proxy.run_env(profile.kubeconfig, profile.node_name)

    def preflight(self, cluster: Cluster, spec: PreflightSpec, store: Store) -> list[str]:
        """Every problem that stops this node from taking part; nothing is changed but the
        builds placed (files in builds_dir, the kubelet untouched)."""
        placed = placement_problems(spec.profile, spec.builds, spec.say, spec.accept_new_host_key)
        report = preflight_check(
            spec.profile,
            spec.settings,
            store=store,
            image=spec.image,
            accept_new_host_key=spec.accept_new_host_key,
        )
        problems = placed + [f"{i.name}: {i.detail}" for i in report.items if not i.ok]
        namespace = spec.namespace
        if spec.binaries:
            with NodeSession(spec.profile) as session:
                installer = KubeletBinary(session, Journal(store))
                for path in spec.binaries:
                    try:
                        installer.require_candidate(path)
                    except NodeError as exc:
                        problems.append(str(exc))
        leftover = 0
        try:
            check_owned(cluster, namespace)
        except NamespaceNotOwned as exc:
            problems.append(str(exc))
        except ClusterError:
            pass  # it does not exist yet: created right after the pre-flight
        else:
            leftover = count_pods(cluster, namespace, "")
        if leftover:
            problems.append(f"namespace {namespace}: {leftover} pods already there")
        if spec.pods:
            try:
                allocatable = node_allocatable(cluster, spec.profile.node_name)
            except ClusterError:
                allocatable = {}  # a node the API server lacks: the node check says so
            problems += round_fit_problems(spec.pods, spec.requests, allocatable)
        return problems

    def ensure_namespace(self, cluster: Cluster, namespace: str) -> None:
        ensure_namespace(cluster, namespace)

    def kubelet_builds(
        self, profile: NodeProfile, paths: list[str]
    ) -> dict[str, KubeletBuild | None]:
        """Each kubelet binary's version and known gates, read on the node (None: missing
        or does not run)."""
        with NodeSession(profile) as session:
            return {path: read_build(session, path) for path in dict.fromkeys(paths)}

    def api_server_version(self, cluster: Cluster) -> str | None:
        return str(server_version(cluster).get("git_version") or "") or None

    def kubelet_version(self, cluster: Cluster, node_name: str) -> str:
        return node_status(cluster, node_name).kubelet_version

    def runtime_class_handler(self, cluster: Cluster, name: str) -> str | None:
        return runtime_class_handler(cluster, name)

    def round_pods(self, cluster: Cluster, namespace: str, round_tag: str) -> list[dict[str, Any]]:
        return list_pods(cluster, namespace, round_selector(round_tag))[0]

    def controller(
        self, profile: NodeProfile, store: Store, **terms: Unpack[ControllerTerms]
    ) -> NodeControl:
        """The node's controller; every change it journals is recorded as ``run_id``'s."""
        return NodeController(profile, store, **terms)

    def session(self, profile: NodeProfile) -> NodeAccess:
        return NodeSession(profile)

    def run_round(self, cluster: Cluster, spec: RoundSpec) -> RoundResult:
        return run_round(cluster, spec)
