"""One kubelet restart: the profile's command, then the three health stages.

The Ready stage needs two references taken *before* the command is sent: the heartbeat the
API server has now and the node's own clock (the heartbeat is stamped by that clock, never
judged by ours; :mod:`abtest.node.health`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from abtest.cluster.client import Cluster
from abtest.config.playbook import NodeProfile
from abtest.node import deadman
from abtest.node.health import BeforeRestart, Expectation, HealthReport, HealthWaiter
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
    before = BeforeRestart.read(session, cluster, profile, config_text)
    progress(f"restarting the kubelet ({profile.restart_command})")
    mono = time.monotonic()
    with guard.shield():  # never leave a half-run restart behind; signals wait
        res = session.profile_command(profile.restart_command, timeout=timeout)
        res.check("the kubelet restart command")
    restart_s = time.monotonic() - mono
    report = HealthWaiter(session, cluster, profile).wait(
        expectations, before, restarted_mono=mono, timeout=timeout
    )
    progress(f"healthy: {report.timings()}")
    return report, restart_s
