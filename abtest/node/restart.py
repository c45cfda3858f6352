"""One kubelet restart: the profile's command, then the three health stages.

The Ready stage needs two references taken *before* the command is sent: the heartbeat the
API server has now and the node's own clock (the heartbeat is stamped by that clock, never
judged by ours; :mod:`abtest.node.health`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from abtest.cluster.client import Cluster
from abtest.cluster.nodes import node_status
from abtest.config.playbook import NodeProfile
from abtest.errors import ClusterError
from abtest.node import deadman
from abtest.node.health import Expectation, HealthReport, HealthWaiter, healthz_url, node_clock
from abtest.node.session import NodeSession
from abtest.process.stop import SignalGuard


def restart_and_wait(
    profile: NodeProfile,
    session: NodeSession,
    cluster: Cluster,
    expectations: list[Expectation],
    config_text: str,
    *,
    guard: SignalGuard,
    timeout: float,
    progress: Callable[[str], None],
) -> tuple[HealthReport, float]:
    """Restart with the profile's command; wait for healthz, Ready, verified values.
    Returns the health report and how long the restart command itself took. Through a pod,
    the restart runs detached under a host-side dead-man timer (abtest.node.deadman)."""
    if profile.pod is not None:
        return deadman.restart_and_wait(
            profile,
            session,
            cluster,
            expectations,
            config_text,
            guard=guard,
            timeout=timeout,
            progress=progress,
        )
    url = healthz_url(profile, config_text)
    try:
        hb = node_status(cluster, profile.node_name).heartbeat
        heartbeat_before = hb.timestamp() if hb else None
    except ClusterError:
        heartbeat_before = None
    wall = node_clock(session)
    progress(f"restarting the kubelet ({profile.restart_command})")
    mono = time.monotonic()
    with guard.shield():  # never leave a half-run restart behind; signals wait
        res = session.profile_command(profile.restart_command, timeout=timeout)
        res.check("the kubelet restart command")
    restart_s = time.monotonic() - mono
    report = HealthWaiter(session, cluster, profile).wait(
        expectations,
        url=url,
        restarted_mono=mono,
        restarted_wall=wall,
        heartbeat_before=heartbeat_before,
        timeout=timeout,
    )
    progress(
        f"healthy: healthz {report.healthz_s:.2f} s, Ready {report.ready_s:.2f} s, "
        f"verified {report.verified_s:.2f} s after the restart"
    )
    return report, restart_s
