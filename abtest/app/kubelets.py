"""`abtest kubelets`'s use cases: build kubelets on the controller for a node's architecture,
list what a node's builds_dir holds, remove a build abtest placed there.

Placing a build is not a command of its own: a sweep, a regress side or a bisect step places
the builds it needs in its pre-flight (:mod:`abtest.engine.build_placing`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from abtest.config.build_names import BuildName, parse_build_name
from abtest.config.goarch import checked_goarch, native_goarch
from abtest.config.playbook import NodeProfile
from abtest.errors import UserError
from abtest.lab.local_builds import LocalBuild, build_kubelets
from abtest.node.build_placement import NodeBuild, list_builds, node_goarch, remove_build
from abtest.node.lock import NodeLock
from abtest.node.session import NodeSession

Say = Callable[[str], None]


def target_goarch(
    profile: NodeProfile | None, goarch: str | None, *, accept_new_host_key: bool = False
) -> str:
    """The GOARCH to build for: ``--goarch``, else the profile's node's (``uname -m`` on it),
    else the controller's own."""
    if profile is not None and goarch is not None:
        raise UserError("--profile and --goarch both name the target", "--goarch", "give one")
    if goarch is not None:
        return checked_goarch(goarch, "--goarch")
    if profile is None:
        return native_goarch()
    with NodeSession(profile, accept_new_host_key=accept_new_host_key) as session:
        return node_goarch(session)


def build(
    names: Sequence[str],
    profile: NodeProfile | None,
    goarch: str | None,
    say: Say,
    *,
    accept_new_host_key: bool = False,
) -> list[LocalBuild]:
    """Each named build for the target's architecture, in the controller's cache."""
    builds = [parse_build_name(n, "BUILD") for n in names]
    arch = target_goarch(profile, goarch, accept_new_host_key=accept_new_host_key)
    return build_kubelets(builds, arch, say)


def list_node(profile: NodeProfile, *, accept_new_host_key: bool = False) -> list[NodeBuild]:
    with NodeSession(profile, accept_new_host_key=accept_new_host_key) as session:
        return list_builds(session)


def remove(profile: NodeProfile, name: str, *, accept_new_host_key: bool = False) -> str:
    """Remove one build abtest placed on the profile's node, under the node lock."""
    wanted: BuildName = parse_build_name(name, "BUILD", paths=False)
    with NodeSession(profile, accept_new_host_key=accept_new_host_key) as session:
        lock = NodeLock(
            session.ssh, profile.lock_path, sudo=profile.sudo, profile_name=profile.name
        )
        lock.acquire(f"removing kubelet build {wanted}")
        try:
            return remove_build(session, wanted)
        finally:
            lock.release()
