"""Checks of a fleet (several ``--profile``) before anything is touched, and what a fleet run
says when one node fails.

A sweep on several nodes must not start changing node 1 when node 3 cannot take part: every
node is checked first, read only, and one clear error (exit 2) names what is wrong:

- two profiles for the same node: the same node name, or the same kubelet (SSH address and
  kubelet config path) under two names, which would have two workers rewrite one config;
- a profile whose node the cluster does not know (a typo, a node drained and deleted).

The per-node pre-flight (SSH, sudo, config, factors, image, lock) still runs in each worker;
these are the checks that need every profile at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from abtest.config.playbook import NodeProfile
from abtest.errors import UserError


class ClusterNodes(Protocol):
    def cluster_nodes(self, profile: NodeProfile) -> list[str] | None: ...


def same_node(profiles: Sequence[NodeProfile], *, kubelets: bool = True) -> None:
    """UserError when two profiles name the same node or (``kubelets``) reach the same
    kubelet."""
    by_name: dict[str, NodeProfile] = {}
    by_kubelet: dict[tuple[str, int | None, str], NodeProfile] = {}
    for p in profiles:
        if p.node_name in by_name:
            raise UserError(
                f"profiles {_where(by_name[p.node_name])} and {_where(p)} both name node "
                f"{p.node_name}",
                "--profile",
                "give each node once: two workers would change one node's kubelet",
            )
        by_name[p.node_name] = p
        if not kubelets:
            continue
        # no port: as the SSH config resolves it, the same for both profiles of one host
        # (a pod profile's kubelet is its node's: two profiles of one node are refused above)
        key = (p.ssh.host, p.ssh.port, p.kubelet_config_path) if p.ssh else (p.node_name, None, "")
        if key in by_kubelet:
            first = by_kubelet[key]
            raise UserError(
                f"profiles {_where(first)} (node {first.node_name}) and {_where(p)} (node "
                f"{p.node_name}) reach the same kubelet: {_address(p)}, "
                f"{p.kubelet_config_path}",
                "--profile",
                "give each node once, each profile with its own kubelet config path",
            )
        by_kubelet[key] = p


def nodes_in_cluster(profiles: Sequence[NodeProfile], kit: ClusterNodes) -> None:
    """UserError naming every profile whose node its cluster does not have. A cluster whose
    nodes these credentials may not list (None) is left to each node's pre-flight."""
    missing = []
    known: dict[tuple[str | None, str | None], list[str] | None] = {}
    for p in profiles:
        key = (p.kubeconfig, p.kube_context)
        if key not in known:
            known[key] = kit.cluster_nodes(p)
        there = known[key]
        if there is not None and p.node_name not in there:
            missing.append((p, sorted(there)))
    if missing:
        what = "; ".join(
            f"profile {_where(p)} names node {p.node_name}, which is not in its cluster "
            f"({p.kubeconfig or 'default kubeconfig'}; nodes there: {', '.join(there) or 'none'})"
            for p, there in missing
        )
        raise UserError(what, "--profile", "fix the profile's node_name or join the node first")


def check_fleet(profiles: Sequence[NodeProfile], kit: ClusterNodes) -> None:
    """What the sweep checks of all its profiles at once; raises before anything is touched.

    Loading the plan checked the profiles' kubelets (``build_plan``); a plan put together in
    code (the fake nodes of the tests) has node names and a cluster to check them against.
    """
    same_node(profiles, kubelets=False)
    nodes_in_cluster(profiles, kit)


def skipped_arms(failed_by_node: dict[str, dict[str, str]]) -> str:
    """The run's reason when arms could not be applied: each arm with the node it failed on
    (with several nodes an arm can fail on one and be measured on the others)."""
    several = len(failed_by_node) > 1
    parts = sorted(
        f"{arm} on {node}" if several else arm
        for node, arms in failed_by_node.items()
        for arm in arms
    )
    return f"arms failed to apply and were skipped: {', '.join(parts)}"


def _address(p: NodeProfile) -> str:
    if p.ssh is None:
        return f"node {p.node_name} through a pod"
    return f"{p.ssh.host}:{p.ssh.port}" if p.ssh.port else p.ssh.host


def _where(p: NodeProfile) -> str:
    return p.source or p.name
