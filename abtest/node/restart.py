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
from abtest.node.health import (
    BeforeRestart,
    Expectation,
    HealthFailed,
    HealthReport,
    HealthWaiter,
)
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
    the restart runs detached under a host-side dead-man timer (abtest.node.deadman) that is
    disarmed only once the restart is verified."""
    before = BeforeRestart.read(session, cluster, profile, config_text)
    with guard.shield():  # never a half-run restart, nor one through a pod without its timer
        timer = deadman.arm(session) if profile.pod is not None else None
        progress(_starting(profile, timer))
        mono = time.monotonic()
        if timer is None:
            res = session.profile_command(profile.restart_command, timeout=timeout)
            res.check("the kubelet restart command")
        else:
            deadman.restart_detached(session, progress)
    restart_s = time.monotonic() - mono
    try:
        report = HealthWaiter(session, cluster, profile).wait(
            expectations, before, restarted_mono=mono, timeout=timeout
        )
    except HealthFailed:
        if timer is not None:
            progress("restart not verified; the dead-man timer puts the originals back by itself")
            deadman.wait_for_timer(session, timer, timeout)
        raise
    if timer is None:
        progress(f"healthy: {report.timings()}")
        return report, restart_s
    with guard.shield():
        deadman.disarm(session, timer)
    progress(f"healthy: {report.timings()} (through the API server); timer disarmed")
    return report, restart_s


def _starting(profile: NodeProfile, timer: deadman.Timer | None) -> str:
    if timer is None:
        return f"restarting the kubelet ({profile.restart_command})"
    return (
        f"dead-man timer armed on the node (pid {timer.pid}, {timer.delay_s:g} s); "
        f"restarting the kubelet detached ({profile.restart_command})"
    )
