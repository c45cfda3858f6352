"""Plain records of one round. Times ending in ``_s`` are seconds since the round's t0 (the
moment the first create request was sent) on one monotonic clock; ``started_wall`` maps t0 to
unix time. ``server_*`` are the API server's own timestamps (unix seconds; Kubernetes writes
them with one-second resolution) kept for cross-checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from abtest.batch.round_gaps import GapPart


@dataclass
class PodRecord:
    name: str
    sent_s: float | None = None  # first create attempt sent
    response_s: float | None = None  # final create response received
    scheduled_s: float | None = None  # first seen PodScheduled=True
    ready_to_start_s: float | None = None  # first seen PodReadyToStartContainers=True
    initialized_s: float | None = None  # first seen Initialized=True
    containers_ready_s: float | None = None  # first seen ContainersReady=True
    ready_s: float | None = None  # first seen Ready=True
    # the runtime started the pod's last container (CRI started_at on the node's wall clock,
    # as seconds since t0: abtest.batch.runtime_start); None when not read
    container_started_s: float | None = None
    http_status: int | None = None  # of the final create attempt (None: no answer)
    attempts: int = 0
    restarts: int = 0
    ready_regressed: int = 0  # Ready=True -> not Ready transitions seen
    server_created: float | None = None
    server_scheduled: float | None = None
    server_ready: float | None = None
    server_ready_written: float | None = None  # API write of the Ready=True status (not stored)
    create_error: str | None = None  # why the create failed, if it did
    waiting_reason: str | None = None  # last container waiting reason seen (ErrImagePull ...)

    @property
    def latency_s(self) -> float | None:
        """Per-pod startup latency: create request sent -> first Ready=True seen."""
        if self.sent_s is None or self.ready_s is None:
            return None
        return self.ready_s - self.sent_s

    @property
    def created(self) -> bool:
        """2xx, or 409 AlreadyExists on a retry (an earlier attempt did create it)."""
        if self.http_status is None:
            return False
        return 200 <= self.http_status < 300 or (self.http_status == 409 and self.attempts > 1)


@dataclass(frozen=True)
class EventRecord:
    pod: str | None
    reason: str
    message: str
    count: int
    type: str = "Normal"


@dataclass(frozen=True)
class MetricDelta:
    metric: str
    labels: str  # canonical 'k="v",k2="v2"', sorted; '' when none
    delta_sum: float | None  # None for counters
    delta_count: float


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    reasons: tuple[str, ...] = ()

    @property
    def reason(self) -> str | None:
        return "; ".join(self.reasons) if self.reasons else None


@dataclass(frozen=True)
class Summary:
    size: int
    pods_ready: int
    latencies_s: tuple[float, ...]  # Ready pods only, in pod-name order
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None
    mean_s: float | None
    batch_ready_s: float | None
    submit_rate: float | None
    restarts: int
    ready_regressions: int
    create_failures: int
    create_retries: int
    phases: dict[str, float] = field(default_factory=dict)


@dataclass
class RoundResult:
    """Everything one round measured; ``abtest.batch.record.record_round`` stores it."""

    node_name: str
    namespace: str
    size: int
    round_tag: str
    started_wall: float
    accepted: bool
    reason: str | None
    summary: Summary
    pods: list[PodRecord]
    events: list[EventRecord]
    metric_deltas: list[MetricDelta]
    sandbox_failures: int
    timed_out: bool
    watch_restarts: int
    watch_relisted: int
    client_cpu_s: float | None  # CPU time of the generator (its thread) while submitting
    process_cpu_s: float | None  # CPU time of the whole process over the same span
    cleanup_s: float | None  # delete -> gone from the API and node sandboxes at the baseline
    cleanup_api_s: float | None  # delete -> gone from the API
    cleanup_ok: bool
    cleanup_note: str | None
    sandbox_baseline: int | None
    sandbox_after: int | None
    qps: float
    concurrency: int
    timeout_s: float
    observe_s: float
    workload: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what could not be measured, and why
    # the gaps around the measured span, in parts (abtest.batch.round_gaps), and the monotonic
    # times the round was entered and returned (the sweep's share between rounds)
    gap_parts: list[GapPart] = field(default_factory=list)
    entered_mono: float | None = None
    returned_mono: float | None = None

    def measures(self) -> dict[str, Any]:
        """What the round measured, by the names the rounds table and ``abtest batch --json``
        both use, in the JSON's order: the one place a round's measures become named values
        (``abtest.batch.record.round_row`` and ``abtest.app.batch.SingleBatch.to_dict`` lay
        them out with their own keys around them)."""
        s = self.summary
        return {
            "pods_ready": s.pods_ready,
            "batch_ready_s": s.batch_ready_s,
            "p50_s": s.p50_s,
            "p95_s": s.p95_s,
            "p99_s": s.p99_s,
            "mean_s": s.mean_s,
            "submit_rate": s.submit_rate,
            "sandbox_failures": self.sandbox_failures,
            "restarts": s.restarts,
            "ready_regressions": s.ready_regressions,
            "create_failures": s.create_failures,
            "create_retries": s.create_retries,
            "watch_restarts": self.watch_restarts,
            "watch_relisted": self.watch_relisted,
            "client_cpu_s": self.client_cpu_s,
            "cleanup_s": self.cleanup_s,
        }
