"""Placing the kubelet builds a sweep's arms need on its node, before the pre-flight reads them.

Runs in the pre-flight, before any change and outside every measured round, under the node
lock (taken for the placement alone, released before the sweep's controller takes its own):
the node's architecture is read (``uname -m``), each build the node lacks is taken from the
controller's cache (built there first when it is not: minutes) and placed with
:func:`abtest.node.build_placement.place_build` (upload, sha256, rename, ``--version``). A
build the node holds already and the controller has not built is used as it is (the
pre-flight reads its version and gates, as before placement existed); one the controller has
is compared by sha256, and a differing one abtest did not place is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from abtest.config.build_names import BuildName
from abtest.config.playbook import NodeProfile
from abtest.errors import AbtestError, NodeLockedError
from abtest.lab.local_builds import cached_path, local_build
from abtest.node.build_placement import LocalFile, node_goarch, place_build
from abtest.node.lock import NodeLock
from abtest.node.session import NodeSession

Say = Callable[[str], None]
#: the node lock's purpose while builds are placed (a dead holder's is taken over)
PURPOSE = "placing kubelet builds"


@dataclass(frozen=True)
class Placed:
    """What one placement did: the builds uploaded and the ones the node held already."""

    uploaded: tuple[str, ...] = ()
    present: tuple[str, ...] = ()


def place_needed(
    profile: NodeProfile,
    builds: Sequence[BuildName],
    say: Say,
    *,
    accept_new_host_key: bool = False,
    session: NodeSession | None = None,
) -> Placed:
    """Every build in ``builds`` on the node whose profile lets abtest place builds; an
    AbtestError (one line, nothing measured) for a build that cannot be placed. ``session``:
    the node's (a test's over a fake connection), else one opened here."""
    wanted = list(dict.fromkeys(builds))
    if not wanted or not profile.place_builds or profile.kubelet_builds_dir is None:
        return Placed()
    opened = session or NodeSession(profile, accept_new_host_key=accept_new_host_key)
    with opened as session:
        lock = NodeLock(
            session.ssh, profile.lock_path, sudo=profile.sudo, profile_name=profile.name
        )
        _acquire(lock)
        try:
            return _place_all(session, wanted, say)
        finally:
            lock.release()


def _acquire(lock: NodeLock) -> None:
    """The node lock for a placement. A lock left by a placement whose controller is gone
    (killed mid-upload) is taken over: a placement changes no kubelet, so there is nothing
    for `node restore` to put back first. Any other held lock is refused as always."""
    try:
        lock.acquire(PURPOSE)
    except NodeLockedError:
        held = lock.read()
        if held is None or held.purpose != PURPOSE or held.holder_alive() is not False:
            raise
        lock.acquire(PURPOSE, reclaim_dead=True)


def _place_all(session: NodeSession, wanted: list[BuildName], say: Say) -> Placed:
    goarch = node_goarch(session)
    uploaded, present = [], []
    for build in wanted:
        on_node = session.run(["test", "-f", session.profile.build_binary(build)], timeout=20).ok
        if on_node and cached_path(build, goarch) is None:
            present.append(build.name)  # the node's own copy, read by the pre-flight
            continue
        local = local_build(build, goarch, say)
        if place_build(session, build, LocalFile(local.binary, local.sha256, local.source), say):
            uploaded.append(build.name)
        else:
            present.append(build.name)
    if present:
        say(f"kubelet builds on {session.profile.node_name} already: {', '.join(present)}")
    return Placed(tuple(uploaded), tuple(present))


def placement_problems(
    profile: NodeProfile, builds: Sequence[BuildName], say: Say, accept_new_host_key: bool
) -> list[str]:
    """:func:`place_needed` as the pre-flight's problems: [] when every build is placed."""
    try:
        place_needed(profile, builds, say, accept_new_host_key=accept_new_host_key)
    except AbtestError as exc:
        return [f"placing kubelet builds: {exc}"]
    return []
