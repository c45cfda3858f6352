"""The runtime's container starts joined to what the watch saw: the status pipeline's lag.

The watch sees a milestone only when the kubelet's status write carrying it reaches the API
server, so "containers" (PodReadyToStartContainers seen -> ContainersReady seen) mixes the
runtime's work with the kubelet's status pipeline (status manager, its API writes, the
watch). The runtime's own record of each container's start (CRI ``started_at``, nanoseconds,
read on the node after the round: abtest.node.container_starts) splits it, on any kubelet:

- ``container_start``: PodReadyToStartContainers seen -> the runtime started the pod's last
  container (negative when the container ran before the status saying the sandbox was ready
  became visible: that status write was the slower one);
- ``status_lag``: that start -> ContainersReady seen (the status pipeline's lag).

The two add up to the containers phase. Runtime times are the node's wall clock, the watch's
are this machine's monotonic clock mapped to its wall clock at t0 (``RoundResult.started_wall``);
on a remote node their clocks' offset moves time from one part to the other (not their sum).
Each pod is joined by its UID (label ``io.kubernetes.pod.uid``), so a container of an earlier
pod of the same name never counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from abtest.batch.round_records import MetricDelta, PodRecord

# The round's means of the two parts, kept with the kubelet's histograms (sum over the joined
# pods, count of them) so a report compares them per arm with intervals like any stage; not a
# kubelet metric, hence the prefix.
CONTAINER_START = "abtest_runtime_container_start_seconds"
STATUS_LAG = "abtest_runtime_status_lag_seconds"


def join_starts(
    records: Sequence[PodRecord],
    uids: Mapping[str, str],
    starts_ns: Mapping[str, int],
    wall_t0: float,
) -> list[PodRecord]:
    """Each pod's record with ``container_started_s`` (seconds since t0) from the runtime start
    of the container of its UID (``uids``: pod name -> UID the watch saw); a pod the watch saw
    no UID for, or whose UID the runtime listed no started container of, keeps None."""
    out = []
    for rec in records:
        uid = uids.get(rec.name)
        ns = starts_ns.get(uid) if uid else None
        started = None if ns is None else ns / 1e9 - wall_t0
        out.append(replace(rec, container_started_s=started))
    return out


def runtime_deltas(records: Sequence[PodRecord]) -> list[MetricDelta]:
    """The round's two parts as histogram-like rows (sum of the pods' spans, count of pods
    with both milestones); none for a part no pod has."""
    out = []
    for metric, start, end in (
        (CONTAINER_START, "ready_to_start_s", "container_started_s"),
        (STATUS_LAG, "container_started_s", "containers_ready_s"),
    ):
        spans = [
            b - a
            for r in records
            if (a := getattr(r, start)) is not None and (b := getattr(r, end)) is not None
        ]
        if spans:
            out.append(MetricDelta(metric, "", float(sum(spans)), float(len(spans))))
    return out
