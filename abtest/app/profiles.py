"""Node profiles as a command names them, with kubectl's --kubeconfig/--context applied."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from abtest.config.playbook import NodeProfile, load_profile
from abtest.engine.fleet import same_node


def with_kube(profile: NodeProfile, kubeconfig: str | None, context: str | None) -> NodeProfile:
    """The profile with --kubeconfig/--context applied (kubectl's flags win over the file).

    A cluster named on the command line is checked before anything else happens, so a wrong
    context is one clear error here and not a failure half-way through a command."""
    if kubeconfig is None and context is None:
        return profile
    paths = (
        ":".join(str(Path(p).expanduser()) for p in kubeconfig.split(":") if p)
        if kubeconfig
        else None
    )
    chosen = replace(
        profile,
        kubeconfig=paths or profile.kubeconfig,
        kube_context=context or profile.kube_context,
    )
    # Imported here: the Kubernetes client costs every command that never talks to a cluster
    # (gates --list, plan) a second of start-up.
    from abtest.cluster.client import connect, probe

    probe(connect(chosen.kubeconfig, context=chosen.kube_context))
    return chosen


def load_profiles(
    names: Sequence[str], kubeconfig: str | None = None, context: str | None = None
) -> tuple[NodeProfile, ...]:
    """Each named profile (a shipped name or a path), loaded, with the kube flags applied.
    Two profiles for one node (``--profile X --profile X``) are refused first, before a
    cluster is probed or anything is announced."""
    loaded = tuple(load_profile(n) for n in names)
    same_node(loaded)
    return tuple(with_kube(p, kubeconfig, context) for p in loaded)
