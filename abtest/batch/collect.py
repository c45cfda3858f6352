"""What a round saw, as plain records: every pod's timestamps, the events about its pods, the
kubelet's metric deltas, the summary and the verdict (abtest.batch.round calls ``collect``).

Times are seconds since the round's t0 (its first create request, ``time.monotonic()``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from abtest.batch import metrics
from abtest.batch.acceptance import judge
from abtest.batch.generator import SubmitResult
from abtest.batch.observe import PodSeen
from abtest.batch.round_gaps import AFTER, GapPart, Laps
from abtest.batch.round_records import EventRecord, MetricDelta, PodRecord, Summary, Verdict
from abtest.batch.runtime_start import join_starts, runtime_deltas
from abtest.batch.summary import summarize
from abtest.cluster.client import Cluster, node_proxy_get
from abtest.cluster.pods import list_pod_events, pod_events_version
from abtest.errors import AbtestError, ClusterError

MetricsScrape = dict[metrics.Key, tuple[float | None, float]]
# the listing's own request timeout is 30 s; a thread still busy well past it is stuck
EVENTS_JOIN_S = 90.0


def scrape(cluster: Cluster, node_name: str) -> MetricsScrape:
    """The kubelet's metrics, through the API server's node proxy."""
    return metrics.parse(node_proxy_get(cluster, node_name, "metrics", timeout=30))


class EventsListing:
    """The events about a round's pods as they were when it was made, listed in a thread.

    Why a thread: the namespace keeps up to an hour of earlier rounds' events (the API
    server's event TTL), so the listing takes seconds; it only reads, so it runs while the
    round's pods are deleted and the node is cleaned. Why a resourceVersion: the listing is
    of the moment it was asked for (``pod_events_version``, read here before anything is
    deleted), so what it holds is what a listing at that moment held, whatever the deletion
    writes (e.g. the kubelet's Killing events) while it runs."""

    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        names: set[str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.resource_version = pod_events_version(cluster, namespace)
        self.seconds: float | None = None  # how long the listing took (in its thread)
        self._clock = clock
        self._records: list[EventRecord] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run,
            args=(cluster, namespace, names),
            name="abtest-round-events",
            daemon=True,
        )
        self._thread.start()

    def _run(self, cluster: Cluster, namespace: str, names: set[str]) -> None:
        start = self._clock()
        try:
            raw = list_pod_events(cluster, namespace, names, resource_version=self.resource_version)
            self._records = event_records(raw)
        except BaseException as exc:  # handed to the caller by result()
            self._error = exc
        finally:
            self.seconds = self._clock() - start

    def result(self, timeout_s: float = EVENTS_JOIN_S) -> list[EventRecord]:
        """Wait for the listing; its error, if it failed, is raised here."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise ClusterError(f"listing the round's events did not end within {timeout_s:g} s")
        if self._error is not None:
            raise self._error
        assert self._records is not None
        return self._records


@dataclass
class Collected:
    events: EventsListing  # still being listed: ``events.result()`` once the node is clean
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
    container_starts: Callable[[], dict[str, int] | None] | None = None,
    wall_t0: float | None = None,
) -> Collected:
    """Events (as of now, listed in the background: ``Collected.events``), kubelet metrics
    after (a failed scrape is a note), every pod's record, the summary and the verdict; laps
    ``events`` (the snapshot's resourceVersion, the listing started), ``metrics_after`` and
    ``judge``. A problem ``verify`` reports (run while the round's pods still exist) rejects
    the round. ``container_starts`` (read while the containers still exist; ``wall_t0`` is the
    wall time of t0) splits each pod's containers phase at the runtime's start: a failed
    read is a note."""
    say("collecting events and metrics")
    events = EventsListing(cluster, namespace, set(names), laps.clock)
    laps.lap("events")
    try:
        deltas: list[MetricDelta] = []
        if metrics_before is not None:
            try:
                deltas = metrics.deltas(metrics_before, scrape(cluster, node_name))
            except (AbtestError, ValueError) as exc:
                notes.append(f"kubelet metrics after the round: {exc}")
        laps.lap("metrics_after")
        records = pod_records(names, sub, seen, t0)
        if container_starts is not None and wall_t0 is not None:
            joined = _with_runtime_starts(records, seen, container_starts, wall_t0, notes)
            if joined is not None:  # read (or failed): its own lap of the gap after
                records = joined
                deltas.extend(runtime_deltas(records))
                laps.lap("container_starts")
        summary = summarize(records, len(names))
        verdict = judge(records, len(names), timed_out=timed_out, timeout_s=timeout_s)
        if verify is not None and (problem := verify()):
            verdict = replace(verdict, accepted=False, reasons=(*verdict.reasons, problem))
        laps.lap("judge")
    except BaseException as exc:
        finish_events(events, exc)
        raise
    return Collected(events, deltas, records, summary, verdict)


def _with_runtime_starts(
    records: list[PodRecord],
    seen: dict[str, PodSeen],
    read: Callable[[], dict[str, int] | None],
    wall_t0: float,
    notes: list[str],
) -> list[PodRecord] | None:
    """The records joined to the runtime's starts; None when the node has no listing."""
    try:
        starts = read()
    except AbtestError as exc:
        notes.append(f"container starts (runtime): {exc}")
        return records
    if starts is None:
        return None
    uids = {name: s.uid for name, s in seen.items() if s.uid}
    joined = join_starts(records, uids, starts, wall_t0)
    missing = sum(
        1 for r in joined if r.containers_ready_s is not None and r.container_started_s is None
    )
    if missing:
        notes.append(f"container starts (runtime): {missing} ContainersReady pods not listed")
    return joined


def finish_events(events: EventsListing, exc: BaseException) -> None:
    """On the way out after ``exc``: let the listing end (no request of this round outlives
    it); its own failure is added to ``exc``'s notes."""
    try:
        events.result()
    except Exception as err:
        if err is not exc:  # the listing's own failure may be what ended the round
            exc.add_note(f"listing the round's events failed too: {err}")


@dataclass(frozen=True)
class RoundEvents:
    records: list[EventRecord]
    parts: tuple[GapPart, ...]


def events_after_cleanup(events: EventsListing, clock: Callable[[], float]) -> RoundEvents:
    """The round's events, listed while the pods were deleted and the node cleaned: the wait
    for what is left of the listing is a lap of the gap after the round (``events_wait``),
    the listing's own time overlapping detail (``events_list``)."""
    laps = Laps(AFTER, clock)
    records = events.result()
    laps.lap("events_wait")
    laps.detail("events_list", events.seconds)
    return RoundEvents(records, tuple(laps.parts))


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
