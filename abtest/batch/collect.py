"""What a round saw, as plain records: every pod's timestamps, the events about its pods, the
kubelet's metric deltas, the summary and the verdict (abtest.batch.round calls ``collect``).

Times are seconds since the round's t0 (its first create request, ``time.monotonic()``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from abtest.batch import metrics
from abtest.batch.acceptance import judge
from abtest.batch.gaps import Laps
from abtest.batch.generator import SubmitResult
from abtest.batch.model import EventRecord, MetricDelta, PodRecord, Summary, Verdict
from abtest.batch.observe import PodSeen
from abtest.batch.summary import summarize
from abtest.cluster.client import Cluster, node_proxy_get
from abtest.cluster.pods import list_pod_events
from abtest.errors import AbtestError

MetricsScrape = dict[metrics.Key, tuple[float | None, float]]


def scrape(cluster: Cluster, node_name: str) -> MetricsScrape:
    """The kubelet's metrics, through the API server's node proxy."""
    return metrics.parse(node_proxy_get(cluster, node_name, "metrics", timeout=30))


@dataclass
class Collected:
    events: list[EventRecord]
    deltas: list[MetricDelta]
    records: list[PodRecord]
    summary: Summary
    verdict: Verdict


def collect(
    cluster: Cluster,
    *,
    node_name: str,
    namespace: str,
    names: list[str],
    sub: SubmitResult,
    seen: dict[str, PodSeen],
    t0: float,
    metrics_before: MetricsScrape | None,
    timed_out: bool,
    timeout_s: float,
    laps: Laps,
    notes: list[str],
    say: Callable[[str], None],
    verify: Callable[[], str | None] | None = None,
) -> Collected:
    """Events, kubelet metrics after (a failed scrape is a note), every pod's record, the
    summary and the verdict; laps ``events``, ``metrics_after`` and ``judge``. A problem
    ``verify`` reports (run while the round's pods still exist) rejects the round."""
    say("collecting events and metrics")
    events = event_records(list_pod_events(cluster, namespace, set(names)))
    laps.lap("events")
    deltas: list[MetricDelta] = []
    if metrics_before is not None:
        try:
            deltas = metrics.deltas(metrics_before, scrape(cluster, node_name))
        except (AbtestError, ValueError) as exc:
            notes.append(f"kubelet metrics after the round: {exc}")
    laps.lap("metrics_after")
    records = pod_records(names, sub, seen, t0)
    summary = summarize(records, len(names))
    verdict = judge(records, len(names), timed_out=timed_out, timeout_s=timeout_s)
    if verify is not None and (problem := verify()):
        verdict = replace(verdict, accepted=False, reasons=(*verdict.reasons, problem))
    laps.lap("judge")
    return Collected(events, deltas, records, summary, verdict)


def pod_records(
    names: list[str], sub: SubmitResult, seen: dict[str, PodSeen], t0: float
) -> list[PodRecord]:
    def rel(x: float | None) -> float | None:
        return None if x is None else x - t0

    creates = {c.name: c for c in sub.creates}
    out = []
    for name in names:
        c = creates[name]
        s = seen.get(name, PodSeen())
        out.append(
            PodRecord(
                name=name,
                sent_s=rel(c.sent),
                response_s=rel(c.response),
                scheduled_s=rel(s.scheduled),
                ready_to_start_s=rel(s.ready_to_start),
                initialized_s=rel(s.initialized),
                containers_ready_s=rel(s.containers_ready),
                ready_s=rel(s.ready),
                http_status=c.status,
                attempts=c.attempts,
                restarts=s.restarts,
                ready_regressed=s.ready_regressed,
                server_created=s.server_created,
                server_scheduled=s.server_scheduled,
                server_ready=s.server_ready,
                server_ready_written=s.server_ready_written,
                create_error=c.error,
                waiting_reason=s.waiting_reason,
            )
        )
    return out


def event_records(raw: list[dict[str, Any]]) -> list[EventRecord]:
    out = []
    for e in raw:
        involved = e.get("involvedObject") or {}
        count = e.get("count") or (e.get("series") or {}).get("count") or 1
        out.append(
            EventRecord(
                pod=involved.get("name"),
                reason=str(e.get("reason") or ""),
                message=str(e.get("message") or ""),
                count=int(count),
                type=str(e.get("type") or "Normal"),
            )
        )
    return out
