"""Per-round summary from per-pod records (pure).

Percentiles are nearest-rank over all pods of the batch, a pod that never became Ready counting
as slower than any Ready pod (it is censored at the timeout): a percentile that falls on such a
pod is ``None``, never a number computed from the Ready pods alone. So a 20-pod round with one
pod missing still has a P50 but no P95/P99, and mean and batch ready time need every pod Ready.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from abtest.batch.round_records import PodRecord, Summary
from abtest.stats.percentiles import nearest_rank

# Phase breakdown: each phase runs from the first milestone to the second, both as seen by us.
# Initialized=True comes right after scheduling when a pod has no init containers (it does not
# wait for the sandbox), so it is measured from scheduling and kept out of the main chain:
# sent -> scheduled -> PodReadyToStartContainers (sandbox + network) -> ContainersReady -> Ready.
# The containers phase split at the runtime's start of the last container (where the profile
# can list it: abtest.batch.runtime_start): container_start + status_lag = containers.
PHASES: tuple[tuple[str, str, str], ...] = (
    ("create_response", "sent_s", "response_s"),
    ("schedule", "sent_s", "scheduled_s"),
    ("sandbox", "scheduled_s", "ready_to_start_s"),
    ("containers", "ready_to_start_s", "containers_ready_s"),
    ("container_start", "ready_to_start_s", "container_started_s"),
    ("status_lag", "container_started_s", "containers_ready_s"),
    ("ready", "containers_ready_s", "ready_s"),
    ("initialized", "scheduled_s", "initialized_s"),
)


def censored_percentile(latencies: Sequence[float], size: int, q: float) -> float | None:
    """Nearest-rank P``q`` of ``size`` pods of which only ``latencies`` became Ready."""
    if size <= 0 or len(latencies) > size:
        raise ValueError(f"{len(latencies)} latencies for a batch of {size}")
    if not latencies:
        return None
    values = [*latencies, *([math.inf] * (size - len(latencies)))]
    value = nearest_rank(values, q)
    return None if math.isinf(value) else value


def phase_medians(pods: Sequence[PodRecord]) -> dict[str, float]:
    out: dict[str, float] = {}
    for phase, start, end in PHASES:
        spans = [
            getattr(p, end) - getattr(p, start)
            for p in pods
            if getattr(p, start) is not None and getattr(p, end) is not None
        ]
        if spans:
            out[phase] = float(np.median(spans))
    return out


def summarize(pods: Sequence[PodRecord], size: int) -> Summary:
    latencies = [lat for p in pods if (lat := p.latency_s) is not None]
    ready = len(latencies)
    all_ready = ready == size and len(pods) == size
    sent = [p.sent_s for p in pods if p.sent_s is not None]
    batch_ready = None
    if all_ready and sent:
        batch_ready = max(p.ready_s for p in pods if p.ready_s is not None) - min(sent)
    created = [p for p in pods if p.created and p.response_s is not None]
    submit_rate = None
    if created and sent:
        span = max(p.response_s for p in created if p.response_s is not None) - min(sent)
        submit_rate = len(created) / span if span > 0 else None
    return Summary(
        size=size,
        pods_ready=ready,
        latencies_s=tuple(latencies),
        p50_s=censored_percentile(latencies, size, 50),
        p95_s=censored_percentile(latencies, size, 95),
        p99_s=censored_percentile(latencies, size, 99),
        mean_s=float(np.mean(latencies)) if all_ready and latencies else None,
        batch_ready_s=batch_ready,
        submit_rate=submit_rate,
        restarts=sum(p.restarts for p in pods),
        ready_regressions=sum(p.ready_regressed for p in pods),
        create_failures=sum(1 for p in pods if not p.created),
        create_retries=sum(max(p.attempts - 1, 0) for p in pods),
        phases=phase_medians(pods),
    )
