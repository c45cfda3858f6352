"""One round of the reference method (docs/designs.md: ``playbooks/agc-sweep.yaml``).

watch open (from a list's resourceVersion) -> kubelet metrics before -> submit at the target
rate with at most N in flight -> wait until every pod was seen Ready or the timeout -> keep
observing ``observe_s`` more -> events (as of this moment, listed while the cleanup runs),
metrics after, acceptance -> cleanup: delete by label, wait until the pods are gone from the API
and the node's sandbox count is back at its pre-round value (timed). Returns a RoundResult of
plain records; storing is record.py's job.

Clock: every time is ``time.monotonic()`` (one clock for the generator and the watch), kept as
seconds since t0 = the moment the first create request was sent; ``started_wall`` maps t0 to
unix time.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from abtest.batch import metrics, sandbox_wait
from abtest.batch.collect import (
    Collected,
    RoundEvents,
    collect,
    events_after_cleanup,
    finish_events,
    scrape,
)
from abtest.batch.generator import SubmitResult
from abtest.batch.observe import PodTracker
from abtest.batch.round_gaps import AFTER, BEFORE, GapPart, Laps, clock_anchor
from abtest.batch.round_pods import ClusterPods, RoundPods, RoundWatch
from abtest.batch.round_records import PodRecord, RoundResult
from abtest.batch.sandbox_wait import NodeSide, wait_sandboxes
from abtest.batch.spec import RoundSpec, Say, WatchOptions
from abtest.batch.start_phase import wait_random_phase
from abtest.batch.template import RenderedPod, render_batch, round_selector
from abtest.cluster.client import Cluster
from abtest.config.playbook import Generator, Workload
from abtest.errors import AbtestError
from abtest.process import stop as stopping

SANDBOX_FAILURE = "FailedCreatePodSandBox"
# the node-side poll's pace (abtest.batch.sandbox_wait) is part of cleanup()'s contract
POLL_IDLE_S = sandbox_wait.POLL_IDLE_S
POLL_AFTER_REMOVAL_S = sandbox_wait.POLL_AFTER_REMOVAL_S
BACKOFF_FIRST_S = sandbox_wait.BACKOFF_FIRST_S
BACKOFF_MAX_S = sandbox_wait.BACKOFF_MAX_S


def _quiet(_: str) -> None:
    pass


def _created(status: int | None, attempts: int) -> bool:
    return PodRecord("", http_status=status, attempts=attempts).created


@dataclass(frozen=True)
class CleanupResult:
    seconds: float  # delete call -> gone from the API and sandboxes back at the baseline
    api_s: float | None  # delete call -> gone from the API
    ok: bool
    note: str | None
    sandbox_count: int | None  # the last count read (None: not asked)
    reap_failures: int = 0  # how many times removing the stopped sandboxes failed
    reap_error: str | None = None  # the last such failure
    # laps from the delete call on (abtest.batch.round_gaps, phase "after"), adding up to seconds,
    # and overlapping detail (API side, time in node commands, polls)
    parts: tuple[GapPart, ...] = ()

    def reap_note(self) -> str | None:
        if not self.reap_failures:
            return None
        return f"removing stopped sandboxes failed {self.reap_failures}x (last: {self.reap_error})"


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
    pods: RoundPods | None = None,
) -> CleanupResult:
    """Delete the round's pods (one deletecollection by the round's label); wait until they
    are gone from the API (a watch, no polling) and, when the node can be asked, until its
    sandbox count is back at the baseline, removing the tool's stopped sandboxes at each poll.

    A failing ``reap_sandboxes`` (NodeError) is counted and retried after a growing pause;
    the failures are reported in the result, never dropped. ``pods`` asks the API server
    (``ClusterPods(cluster)`` when None)."""
    api = pods if pods is not None else ClusterPods(cluster)
    start = clock()
    deadline = start + timeout_s
    laps = Laps(AFTER, clock, start)

    def pause(seconds: float) -> None:
        sleep(max(0.0, min(seconds, deadline - clock())))

    api.delete(namespace, selector)
    laps.lap("delete_call")
    # grace 0: one list normally finds none; otherwise their DELETED events are awaited
    left = api.count(namespace, selector)
    if left:
        left = api.wait_gone(namespace, selector, max(0.0, deadline - clock()))
    if left:
        api_note = f"{left} pods still in the API after {timeout_s:g} s"
        return CleanupResult(clock() - start, None, False, api_note, None, parts=tuple(laps.parts))
    api_s = clock() - start
    laps.lap("api_gone")
    node = NodeSide()
    count: int | None = None
    ok: bool = True
    note: str | None = None
    if sandbox_count is not None and sandbox_baseline is not None:
        count, ok, left_over = wait_sandboxes(
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


def _cleanup_after_error(
    exc: BaseException,
    cluster: Cluster,
    namespace: str,
    selector: str,
    timeout_s: float,
    pods: RoundPods,
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
            pods=pods,
        )
    except AbtestError as err:
        exc.add_note(f"cleaning up the round's pods after this error failed too: {err}")
        return
    if not res.ok:
        exc.add_note(f"cleaning up the round's pods after this error: {res.note}")


@dataclass
class _Prepared:
    """What a round starts from, before its watch opens."""

    round_tag: str
    selector: str
    pods: list[RenderedPod]
    baseline: int | None  # the node's sandbox count before the round
    before: dict[metrics.Key, tuple[float | None, float]] | None  # kubelet metrics
    notes: list[str]
    pre: Laps  # the gap before the round, lapped on to its first create

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.pods]


@dataclass
class _Waited:
    """The measured span: the creates sent, and the wait for Ready and the observation."""

    sub: SubmitResult
    t0: float  # the first create request (monotonic)
    wall0: float
    mono0: float
    timed_out: bool
    post: Laps  # the gap after the round, from the end of the observation window


def _prepare(
    cluster: Cluster,
    *,
    node_name: str,
    namespace: str,
    size: int,
    run_id: str,
    workload: Workload,
    sandbox_count: Callable[[], int] | None,
    scrape_metrics: bool,
    clock: Callable[[], float],
    api: RoundPods,
) -> _Prepared:
    """Render the round's pods under a fresh round label; read the node's sandbox count and
    the kubelet's metrics before it."""
    pre = Laps(BEFORE, clock)
    api.check_owned(namespace)
    round_tag = secrets.token_hex(5)
    pods = render_batch(
        workload,
        size=size,
        namespace=namespace,
        node_name=node_name,
        run_id=run_id,
        round_tag=round_tag,
    )
    pre.lap("setup")
    baseline = sandbox_count() if sandbox_count is not None else None
    pre.lap("sandbox_baseline")
    notes: list[str] = []
    before = None
    if scrape_metrics:
        try:
            before = scrape(cluster, node_name)
        except (AbtestError, ValueError) as exc:
            notes.append(f"kubelet metrics before the round: {exc}")
    pre.lap("metrics_before")
    return _Prepared(round_tag, round_selector(round_tag), pods, baseline, before, notes, pre)


def _submit_and_wait(
    prep: _Prepared,
    *,
    namespace: str,
    gen: Generator,
    tracker: PodTracker,
    watch: RoundWatch,
    clock: Callable[[], float],
    say: Say,
    api: RoundPods,
) -> _Waited:
    """Open the watch, submit the creates at the target rate, wait until every created pod
    was seen Ready (or the timeout), then observe ``gen.observe_s`` more; the watch is
    stopped whatever happens."""
    size = len(prep.pods)
    watch.start()
    prep.pre.lap("watch_open")
    try:
        if wait_random_phase(gen.start_dither_s):
            prep.pre.lap("start_dither")
        wall0, mono0 = clock_anchor(clock)
        deadline = clock() + gen.timeout_s
        sub = api.submit(
            namespace,
            prep.pods,
            qps=gen.qps,
            concurrency=gen.concurrency,
            deadline=deadline,
            selector=prep.selector,
            clock=clock,
        )
        t0 = sub.first_sent if sub.first_sent is not None else mono0
        prep.pre.lap("first_create", at=t0)
        deadline = t0 + gen.timeout_s
        created = sum(1 for c in sub.creates if _created(c.status, c.attempts))
        say(f"submitted {created}/{size} creates; waiting for Ready")
        # Pods whose create failed can never be Ready: wait for the created ones only.
        reached = tracker.wait_all_ready(deadline, clock, target=created)
        if reached and created == size:
            last = tracker.last_ready or clock()
            while (left := last + gen.observe_s - clock()) > 0 and not tracker.aborted:
                stopping.sleep(min(left, 0.5))  # a signal ends the round here
    finally:
        # the gap after the round starts here: observation over (or given up)
        post = Laps(AFTER, clock)
        tracker.freeze()
        watch.stop()
        post.lap("watch_stop")
    return _Waited(sub, t0, wall0, mono0, not reached, post)


def _clean_up(
    cluster: Cluster,
    prep: _Prepared,
    *,
    namespace: str,
    sandbox_count: Callable[[], int] | None,
    timeout_s: float,
    clock: Callable[[], float],
    reap_sandboxes: Callable[[], int] | None,
    clean_sandboxes: Callable[[str], int] | None,
    say: Say,
    api: RoundPods | None = None,
) -> CleanupResult:
    """Delete the round's pods and wait for a clean node; the node side stops and removes
    this round's own sandboxes (``clean_sandboxes``) when it can, else removes the
    namespace's stopped ones as the kubelet stops them (``reap_sandboxes``)."""
    say("cleaning up")
    reap = reap_sandboxes
    if clean_sandboxes is not None:
        tag = prep.round_tag
        reap = lambda: clean_sandboxes(tag)  # noqa: E731 - bound to this round's label
    return cleanup(
        cluster,
        namespace,
        prep.selector,
        sandbox_count=sandbox_count,
        sandbox_baseline=prep.baseline,
        timeout_s=timeout_s,
        clock=clock,
        reap_sandboxes=reap,
        pods=api,
    )


def _result(
    prep: _Prepared,
    waited: _Waited,
    got: Collected,
    events: RoundEvents,
    cleaned_up: CleanupResult,
    watch: RoundWatch,
    node_name: str,
    namespace: str,
    gen: Generator,
    workload: Workload,
) -> RoundResult:
    notes = prep.notes
    if cleaned_up.note:
        notes.append(cleaned_up.note)
    elif reaped := cleaned_up.reap_note():
        notes.append(reaped)
    if watch.restarts or watch.relists:
        notes.append(
            f"pod watch re-opened {watch.restarts}x, re-listed {watch.relists}x "
            f"(last: {watch.last_error})"
        )
    sub = waited.sub
    return RoundResult(
        node_name=node_name,
        namespace=namespace,
        size=len(prep.pods),
        round_tag=prep.round_tag,
        started_wall=waited.wall0 + (waited.t0 - waited.mono0),
        accepted=got.verdict.accepted,
        reason=got.verdict.reason,
        summary=got.summary,
        pods=got.records,
        events=events.records,
        metric_deltas=got.deltas,
        sandbox_failures=sum(e.count for e in events.records if e.reason == SANDBOX_FAILURE),
        timed_out=waited.timed_out,
        watch_restarts=watch.restarts,
        watch_relisted=watch.relists,
        client_cpu_s=sub.thread_cpu_s,
        process_cpu_s=sub.process_cpu_s,
        cleanup_s=cleaned_up.seconds,
        cleanup_api_s=cleaned_up.api_s,
        cleanup_ok=cleaned_up.ok,
        cleanup_note=cleaned_up.note,
        sandbox_baseline=prep.baseline,
        sandbox_after=cleaned_up.sandbox_count,
        qps=gen.qps,
        concurrency=gen.concurrency,
        timeout_s=gen.timeout_s,
        observe_s=gen.observe_s,
        workload=asdict(workload),
        notes=notes,
        gap_parts=[*prep.pre.parts, *waited.post.parts, *cleaned_up.parts, *events.parts],
        entered_mono=prep.pre.start,
        returned_mono=time.monotonic(),
    )


def run_round(cluster: Cluster, spec: RoundSpec, *, pods: RoundPods | None = None) -> RoundResult:
    """Run the round ``spec`` describes on the node as it is, clean up after it, and return
    what it measured.

    ``verify`` is given the round's label value after the observation, while the round's pods
    and sandboxes still exist (a runtime arm proves each sandbox's handler); the problem it
    returns, if any, rejects the round.

    ``sandbox_count`` (e.g. ``NodeSession.sandbox_count``) is read before the round and polled
    after the delete until it is back at that value; without it only the API side is waited
    for. ``clean_sandboxes`` (``NodeSession.clean_round_sandboxes`` with the namespace bound;
    it is given the round's label value) stops this round's own sandboxes once its pods are
    gone from the API and removes them, so no pod waits out the kubelet's 2 s minimum grace.
    Without it, ``reap_sandboxes`` (``NodeSession.remove_stopped_sandboxes``) removes the
    stopped sandboxes of the deleted pods instead of waiting for the kubelet's container GC,
    which would otherwise run (up to a minute later) in the middle of the next round. The
    namespace must exist and be the tool's own (``ensure_namespace``).

    ``pods`` is what the round asks the API server about its pods (the namespace check, the
    creates, the watch, the delete): ``ClusterPods(cluster)`` when None; a test passes
    :class:`abtest.testing.FakePods`. The kubelet's metrics and the events are read from
    ``cluster`` itself (a round with ``scrape_metrics=False`` reads no metrics).
    """
    node_name, namespace, size = spec.node_name, spec.namespace, spec.size
    sandbox_count, verify, say = spec.sandbox_count, spec.verify, spec.say or _quiet
    if size < 1:
        raise ValueError("a round needs at least one pod")
    workload = spec.workload or Workload()
    gen = spec.generator or Generator()
    wopts = spec.watch_options or WatchOptions()
    clock = time.monotonic
    api = pods if pods is not None else ClusterPods(cluster)
    prep = _prepare(
        cluster,
        node_name=node_name,
        namespace=namespace,
        size=size,
        run_id=spec.run_id,
        workload=workload,
        sandbox_count=sandbox_count,
        scrape_metrics=spec.scrape_metrics,
        clock=clock,
        api=api,
    )
    tracker = PodTracker(prep.names)
    watch = api.watch(
        namespace,
        prep.selector,
        tracker.observe,
        server_timeout_s=wopts.server_timeout_s,
        clock=clock,
        start_resource_version=wopts.start_resource_version,
        on_failure=tracker.abort,
    )
    say(f"round {prep.round_tag}: {size} pods -> {node_name} ({namespace})")
    got: Collected | None = None
    try:
        waited = _submit_and_wait(
            prep,
            namespace=namespace,
            gen=gen,
            tracker=tracker,
            watch=watch,
            clock=clock,
            say=say,
            api=api,
        )
        if watch.error is not None:
            # the watch gave up (e.g. 410 Gone again and again): nothing it did not see can be
            # judged, so the round is not recorded; its pods are cleaned up below
            raise watch.error
        got = collect(
            cluster,
            node_name=node_name,
            namespace=namespace,
            names=prep.names,
            sub=waited.sub,
            seen=tracker.snapshot(),
            t0=waited.t0,
            metrics_before=prep.before,
            timed_out=waited.timed_out,
            timeout_s=gen.timeout_s,
            laps=waited.post,
            notes=prep.notes,
            say=say,
            verify=None if verify is None else (lambda: verify(prep.round_tag)),
            container_starts=spec.container_starts,
            wall_t0=waited.wall0 + (waited.t0 - waited.mono0),
        )
        cleaned_up = _clean_up(
            cluster,
            prep,
            namespace=namespace,
            sandbox_count=sandbox_count,
            timeout_s=spec.cleanup_timeout_s,
            clock=clock,
            reap_sandboxes=spec.reap_sandboxes,
            clean_sandboxes=spec.clean_sandboxes,
            say=say,
            api=api,
        )
        # the events were listed (as of before the delete) while the node was cleaned
        events = events_after_cleanup(got.events, clock)
    except BaseException as exc:
        # an error ended the round early: still take its pods away, then let it propagate
        _cleanup_after_error(exc, cluster, namespace, prep.selector, spec.cleanup_timeout_s, api)
        if got is not None:
            finish_events(got.events, exc)
        raise
    return _result(
        prep, waited, got, events, cleaned_up, watch, node_name, namespace, gen, workload
    )
