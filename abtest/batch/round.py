"""One round of the reference method (README, "Data": ``playbooks/agc-sweep.yaml``).

watch open (from a list's resourceVersion) -> kubelet metrics before -> submit at the target
rate with at most N in flight -> wait until every pod was seen Ready or the timeout -> keep
observing ``observe_s`` more -> events, metrics after, acceptance -> cleanup: delete by label,
wait until the pods are gone from the API and the node's sandbox count is back at its
pre-round value (timed). Returns a RoundResult of plain records; storing is record.py's job.

Clock: every time is ``time.monotonic()`` (one clock for the generator and the watch), kept as
seconds since t0 = the moment the first create request was sent; ``started_wall`` maps t0 to
unix time.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from abtest import stopping
from abtest.batch import metrics
from abtest.batch.acceptance import judge
from abtest.batch.gaps import AFTER, BEFORE, GapPart, Laps
from abtest.batch.generator import SubmitResult, submit
from abtest.batch.model import EventRecord, MetricDelta, PodRecord, RoundResult
from abtest.batch.observe import PodSeen, PodTracker
from abtest.batch.summary import summarize
from abtest.batch.template import render_batch, round_selector
from abtest.cluster.client import Cluster, node_proxy_get
from abtest.cluster.namespaces import check_owned
from abtest.cluster.pods import (
    PodWatch,
    count_pods,
    delete_pods,
    list_pod_events,
    wait_pods_gone,
)
from abtest.errors import AbtestError, NodeError
from abtest.playbook import Generator, Workload

SANDBOX_FAILURE = "FailedCreatePodSandBox"
Say = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def _created(status: int | None, attempts: int) -> bool:
    return PodRecord("", http_status=status, attempts=attempts).created


def clock_anchor(clock: Callable[[], float] = time.monotonic) -> tuple[float, float]:
    """(wall, mono) read as close together as this machine allows (best of 5)."""
    best: tuple[float, float, float] | None = None
    for _ in range(5):
        a = clock()
        wall = time.time()
        b = clock()
        if best is None or b - a < best[0]:
            best = (b - a, wall, (a + b) / 2)
    assert best is not None
    return best[1], best[2]


@dataclass(frozen=True)
class WatchOptions:
    """Knobs for tests: a short server timeout forces re-established watches; an old
    resourceVersion forces the 410 Gone re-list path."""

    server_timeout_s: int = 3600
    start_resource_version: str | None = None


def _scrape(cluster: Cluster, node_name: str) -> dict[metrics.Key, tuple[float | None, float]]:
    return metrics.parse(node_proxy_get(cluster, node_name, "metrics", timeout=30))


def _pod_records(
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


def _events(raw: list[dict[str, Any]]) -> list[EventRecord]:
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


@dataclass(frozen=True)
class CleanupResult:
    seconds: float  # delete call -> gone from the API and sandboxes back at the baseline
    api_s: float | None  # delete call -> gone from the API
    ok: bool
    note: str | None
    sandbox_count: int | None  # the last count read (None: not asked)
    reap_failures: int = 0  # how many times removing the stopped sandboxes failed
    reap_error: str | None = None  # the last such failure
    # laps from the delete call on (abtest.batch.gaps, phase "after"), adding up to seconds,
    # and overlapping detail (API side, time in node commands, polls)
    parts: tuple[GapPart, ...] = ()

    def reap_note(self) -> str | None:
        if not self.reap_failures:
            return None
        return f"removing stopped sandboxes failed {self.reap_failures}x (last: {self.reap_error})"


# Sandbox-count polling. The node has no event stream for "sandbox stopped" through the
# profile's commands, so the count is polled; each poll is already a few SSH round trips
# (~0.07 s each on the lab), so the pauses between polls are short. After a failed removal
# the pause grows up to the cap.
POLL_IDLE_S = 0.1
POLL_AFTER_REMOVAL_S = 0.0
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 5.0


@dataclass
class _NodeSide:
    """Counters of the node-side wait, for the parts and the notes."""

    polls: int = 0
    removed: int = 0
    command_s: float = 0.0
    failures: int = 0
    last_error: str | None = None


def cleanup(
    cluster: Cluster,
    namespace: str,
    selector: str,
    *,
    sandbox_count: Callable[[], int] | None,
    sandbox_baseline: int | None,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
    reap_sandboxes: Callable[[], int] | None = None,
    sleep: Callable[[float], None] = stopping.sleep,
) -> CleanupResult:
    """Delete the round's pods (one deletecollection call by the round's label selector);
    wait until they are gone from the API (a watch for their deletions, no polling) and, when
    the node can be asked, until its sandbox count is back at the baseline, removing the
    tool's stopped sandboxes at every poll as the kubelet stops them.

    A failing ``reap_sandboxes`` (NodeError) is counted and retried after a growing pause;
    the failures are reported in the result, never dropped."""
    start = clock()
    deadline = start + timeout_s
    laps = Laps(AFTER, clock, start)

    def pause(seconds: float) -> None:
        sleep(max(0.0, min(seconds, deadline - clock())))

    delete_pods(cluster, namespace, selector)
    laps.lap("delete_call")
    # grace 0: the API server forgets the pods within the delete call, so one list normally
    # finds none; otherwise their DELETED events are awaited
    left = count_pods(cluster, namespace, selector)
    if left:
        left = wait_pods_gone(cluster, namespace, selector, max(0.0, deadline - clock()))
    if left:
        api_note = f"{left} pods still in the API after {timeout_s:g} s"
        return CleanupResult(clock() - start, None, False, api_note, None, parts=tuple(laps.parts))
    api_s = clock() - start
    laps.lap("api_gone")
    node = _NodeSide()
    count: int | None = None
    ok: bool = True
    note: str | None = None
    if sandbox_count is not None and sandbox_baseline is not None:
        count, ok, left_over = _wait_sandboxes(
            node, sandbox_count, sandbox_baseline, reap_sandboxes, clock, pause, deadline
        )
        if not ok:
            note = f"{left_over} after {timeout_s:g} s, {sandbox_baseline} before the round"
            if node.failures:
                note += (
                    f"; removing stopped sandboxes failed {node.failures}x "
                    f"(last: {node.last_error})"
                )
        laps.lap("node_clean")
        laps.detail("node_commands", node.command_s)
        laps.detail("node_polls", float(node.polls))
        laps.detail("sandboxes_removed", float(node.removed))
    return CleanupResult(
        clock() - start,
        api_s,
        ok,
        note,
        count,
        node.failures,
        node.last_error,
        tuple(laps.parts),
    )


def _wait_sandboxes(
    node: _NodeSide,
    sandbox_count: Callable[[], int],
    baseline: int,
    reap_sandboxes: Callable[[], int] | None,
    clock: Callable[[], float],
    pause: Callable[[float], None],
    deadline: float,
) -> tuple[int, bool, str | None]:
    """Poll the node's sandbox count down to ``baseline``, removing the tool's stopped
    sandboxes at each poll: (last count, at baseline?, what was left if not)."""

    def timed(fn: Callable[[], int]) -> int:
        t = clock()
        try:
            return fn()
        finally:
            node.command_s += clock() - t

    backoff = BACKOFF_FIRST_S
    count = timed(sandbox_count)
    node.polls += 1
    while count > baseline:
        if clock() > deadline:
            return count, False, f"node has {count} pod sandboxes"
        # The kubelet stops a deleted pod's sandbox a moment after the API forgets the pod;
        # each poll removes the ones stopped so far.
        removed = 0
        if reap_sandboxes is not None:
            try:
                removed = timed(reap_sandboxes)
            except NodeError as exc:
                node.failures += 1
                node.last_error = str(exc)
                pause(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                count = timed(sandbox_count)
                node.polls += 1
                continue
        node.removed += removed
        backoff = BACKOFF_FIRST_S
        pause(POLL_AFTER_REMOVAL_S if removed else POLL_IDLE_S)
        count = timed(sandbox_count)
        node.polls += 1
    return count, True, None


def _cleanup_after_error(
    exc: BaseException, cluster: Cluster, namespace: str, selector: str, timeout_s: float
) -> None:
    """Delete a failed round's pods; what goes wrong doing so is added to ``exc``'s notes."""
    try:
        res = cleanup(
            cluster,
            namespace,
            selector,
            sandbox_count=None,
            sandbox_baseline=None,
            timeout_s=timeout_s,
        )
    except AbtestError as err:
        exc.add_note(f"cleaning up the round's pods after this error failed too: {err}")
        return
    if not res.ok:
        exc.add_note(f"cleaning up the round's pods after this error: {res.note}")


def run_round(
    cluster: Cluster,
    *,
    node_name: str,
    namespace: str,
    size: int,
    run_id: str,
    workload: Workload | None = None,
    generator: Generator | None = None,
    sandbox_count: Callable[[], int] | None = None,
    cleanup_timeout_s: float = 300.0,
    scrape_metrics: bool = True,
    say: Say = _quiet,
    watch_options: WatchOptions | None = None,
    reap_sandboxes: Callable[[], int] | None = None,
    verify: Callable[[str], str | None] | None = None,
) -> RoundResult:
    """Run one round on the node as it is, clean up after it, and return what it measured.

    ``verify`` is given the round's label value after the observation, while the round's pods
    and sandboxes still exist (a runtime arm proves each sandbox's handler); the problem it
    returns, if any, rejects the round.

    ``sandbox_count`` (e.g. ``NodeSession.sandbox_count``) is read before the round and polled
    after the delete until it is back at that value; without it only the API side is waited
    for. ``reap_sandboxes`` (``NodeSession.remove_stopped_sandboxes``) removes the stopped
    sandboxes of the deleted pods instead of waiting for the kubelet's container GC, which
    would otherwise run (up to a minute later) in the middle of the next round. The
    namespace must exist and be the tool's own (``ensure_namespace``).
    """
    if size < 1:
        raise ValueError("a round needs at least one pod")
    workload = workload or Workload()
    gen = generator or Generator()
    wopts = watch_options or WatchOptions()
    clock = time.monotonic
    pre = Laps(BEFORE, clock)
    entered = pre.start
    check_owned(cluster, namespace)
    round_tag = secrets.token_hex(5)
    selector = round_selector(round_tag)
    pods = render_batch(
        workload,
        size=size,
        namespace=namespace,
        node_name=node_name,
        run_id=run_id,
        round_tag=round_tag,
    )
    names = [p.name for p in pods]
    pre.lap("setup")
    baseline = sandbox_count() if sandbox_count is not None else None
    pre.lap("sandbox_baseline")
    notes: list[str] = []
    before = None
    if scrape_metrics:
        try:
            before = _scrape(cluster, node_name)
        except (AbtestError, ValueError) as exc:
            notes.append(f"kubelet metrics before the round: {exc}")
    pre.lap("metrics_before")

    tracker = PodTracker(names)
    watch = PodWatch(
        cluster,
        namespace,
        selector,
        tracker.observe,
        server_timeout_s=wopts.server_timeout_s,
        clock=clock,
        start_resource_version=wopts.start_resource_version,
        on_failure=tracker.abort,
    )
    say(f"round {round_tag}: {size} pods -> {node_name} ({namespace})")
    try:
        watch.start()
        pre.lap("watch_open")
        try:
            wall0, mono0 = clock_anchor(clock)
            deadline = clock() + gen.timeout_s
            sub = submit(
                cluster,
                namespace,
                pods,
                qps=gen.qps,
                concurrency=gen.concurrency,
                deadline=deadline,
                selector=selector,
                clock=clock,
            )
            t0 = sub.first_sent if sub.first_sent is not None else mono0
            pre.lap("first_create", at=t0)
            deadline = t0 + gen.timeout_s
            created = sum(1 for c in sub.creates if _created(c.status, c.attempts))
            say(f"submitted {created}/{size} creates; waiting for Ready")
            # Pods whose create failed can never be Ready: wait for the created ones only.
            reached = tracker.wait_all_ready(deadline, clock, target=created)
            all_ready = reached and created == size
            if all_ready:
                last = tracker.last_ready or clock()
                while (left := last + gen.observe_s - clock()) > 0 and not tracker.aborted:
                    stopping.sleep(min(left, 0.5))  # a signal ends the round here
            timed_out = not reached
        finally:
            # the gap after the round starts here: observation over (or given up)
            post = Laps(AFTER, clock)
            tracker.freeze()
            watch.stop()
            post.lap("watch_stop")
        if watch.error is not None:
            # the watch gave up (e.g. 410 Gone again and again): nothing it did not see can be
            # judged, so the round is not recorded; its pods are cleaned up below
            raise watch.error
        seen = tracker.snapshot()
        say("collecting events and metrics")
        events = _events(list_pod_events(cluster, namespace, set(names)))
        post.lap("events")
        deltas: list[MetricDelta] = []
        if before is not None:
            try:
                deltas = metrics.deltas(before, _scrape(cluster, node_name))
            except (AbtestError, ValueError) as exc:
                notes.append(f"kubelet metrics after the round: {exc}")
        post.lap("metrics_after")
        records = _pod_records(names, sub, seen, t0)
        summary = summarize(records, size)
        verdict = judge(records, size, timed_out=timed_out, timeout_s=gen.timeout_s)
        if verify is not None and (problem := verify(round_tag)):
            verdict = replace(verdict, accepted=False, reasons=(*verdict.reasons, problem))
        say("cleaning up")
        post.lap("judge")
        cleaned_up = cleanup(
            cluster,
            namespace,
            selector,
            sandbox_count=sandbox_count,
            sandbox_baseline=baseline,
            timeout_s=cleanup_timeout_s,
            clock=clock,
            reap_sandboxes=reap_sandboxes,
        )
    except BaseException as exc:
        # an error ended the round early: still take its pods away, then let it propagate
        _cleanup_after_error(exc, cluster, namespace, selector, cleanup_timeout_s)
        raise
    if cleaned_up.note:
        notes.append(cleaned_up.note)
    elif reaped := cleaned_up.reap_note():
        notes.append(reaped)
    if watch.restarts or watch.relists:
        notes.append(
            f"pod watch re-opened {watch.restarts}x, re-listed {watch.relists}x "
            f"(last: {watch.last_error})"
        )
    return RoundResult(
        node_name=node_name,
        namespace=namespace,
        size=size,
        round_tag=round_tag,
        started_wall=wall0 + (t0 - mono0),
        accepted=verdict.accepted,
        reason=verdict.reason,
        summary=summary,
        pods=records,
        events=events,
        metric_deltas=deltas,
        sandbox_failures=sum(e.count for e in events if e.reason == SANDBOX_FAILURE),
        timed_out=timed_out,
        watch_restarts=watch.restarts,
        watch_relisted=watch.relists,
        client_cpu_s=sub.thread_cpu_s,
        process_cpu_s=sub.process_cpu_s,
        cleanup_s=cleaned_up.seconds,
        cleanup_api_s=cleaned_up.api_s,
        cleanup_ok=cleaned_up.ok,
        cleanup_note=cleaned_up.note,
        sandbox_baseline=baseline,
        sandbox_after=cleaned_up.sandbox_count,
        qps=gen.qps,
        concurrency=gen.concurrency,
        timeout_s=gen.timeout_s,
        observe_s=gen.observe_s,
        workload=asdict(workload),
        notes=notes,
        gap_parts=[*pre.parts, *post.parts, *cleaned_up.parts],
        entered_mono=entered,
        returned_mono=clock(),
    )
