"""Pods through the API server: list, a resumable watch, events, delete by label (owned only).

Everything here reads raw JSON (``_preload_content=False``) and hands plain dicts upward: the
kubernetes client's model decoding costs milliseconds per pod and would sit between a pod's
transition and the moment we record having seen it.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from abtest.cluster.client import Cluster, api_call, convert
from abtest.cluster.labels import MANAGED_BY, MANAGED_BY_KEY
from abtest.cluster.namespaces import check_owned
from abtest.errors import ClusterError

OnEvent = Callable[[str, dict[str, Any], float], None]
"""(event type, pod object, monotonic time its bytes arrived). Types: ADDED, MODIFIED,
DELETED, and RELIST for pods read back by a re-list after the watch expired (410 Gone)."""


def _json(resp: Any) -> Any:
    try:
        return json.loads(resp.data)
    finally:
        resp.release_conn()


@api_call
def list_pods(cluster: Cluster, namespace: str, selector: str) -> tuple[list[dict[str, Any]], str]:
    """The pods matching ``selector`` and the list's resourceVersion (to start a watch from)."""
    resp = cluster.core.list_namespaced_pod(
        namespace, label_selector=selector, _preload_content=False, _request_timeout=30
    )
    data = _json(resp)
    return list(data.get("items") or []), str(data["metadata"]["resourceVersion"])


@api_call
def count_pods(cluster: Cluster, namespace: str, selector: str) -> int:
    return len(list_pods(cluster, namespace, selector)[0])


POD_EVENTS = "involvedObject.kind=Pod"


@api_call
def pod_events_version(cluster: Cluster, namespace: str) -> str:
    """The resourceVersion the API server is at now, read with a one-item list of the
    namespace's pod events (cheap whatever the namespace holds): ``list_pod_events`` given it
    lists the events exactly as they were at this moment, however much later it runs."""
    resp = cluster.core.list_namespaced_event(
        namespace,
        field_selector=POD_EVENTS,
        limit=1,
        _preload_content=False,
        _request_timeout=30,
    )
    return str(_json(resp)["metadata"]["resourceVersion"])


@api_call
def list_pod_events(
    cluster: Cluster,
    namespace: str,
    pod_names: set[str] | None = None,
    *,
    resource_version: str | None = None,
) -> list[dict[str, Any]]:
    """core/v1 Events about pods in ``namespace`` (only the named pods, when given); as they
    were at ``resource_version`` exactly, when given (``pod_events_version``): events written
    or updated since are not in it, as if it had been listed then."""
    exact: dict[str, Any] = {}
    if resource_version is not None:
        exact = {"resource_version": resource_version, "resource_version_match": "Exact"}
    resp = cluster.core.list_namespaced_event(
        namespace,
        field_selector=POD_EVENTS,
        _preload_content=False,
        _request_timeout=30,
        **exact,
    )
    items = _json(resp).get("items") or []
    if pod_names is None:
        return list(items)
    return [e for e in items if (e.get("involvedObject") or {}).get("name") in pod_names]


@api_call
def delete_pods(cluster: Cluster, namespace: str, selector: str) -> None:
    """Delete the tool's pods matching ``selector``, in a namespace the tool owns, at once.

    The selector must include the tool's own label, so nothing the tool did not create is ever
    selected. Grace period 0: the reference workload (``sleep`` as PID 1) ignores SIGTERM, and
    the node side is waited for separately (sandbox count back to the pre-round value).
    """
    if f"{MANAGED_BY_KEY}={MANAGED_BY}" not in selector.split(","):
        raise ClusterError(f"refusing to delete pods with selector {selector!r}: not the tool's")
    check_owned(cluster, namespace)
    cluster.core.delete_collection_namespaced_pod(
        namespace, label_selector=selector, grace_period_seconds=0, _request_timeout=60
    )


def _pod_name(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


@api_call
def wait_pods_gone(
    cluster: Cluster,
    namespace: str,
    selector: str,
    timeout_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Wait until no pod matches ``selector``, watching for their deletions (no polling).

    Lists once (the usual case after a grace-0 delete: none left), then watches from the list's
    resourceVersion until every listed pod was seen DELETED. A stream that ends or expires
    (410 Gone) is followed by a fresh list, so nothing is missed. Returns how many pods are
    still there at ``timeout_s`` (0: all gone)."""
    deadline = clock() + timeout_s
    while True:
        items, rv = list_pods(cluster, namespace, selector)
        left = {_pod_name(p) for p in items}
        if not left:
            return 0
        remaining = deadline - clock()
        if remaining <= 0:
            return len(left)
        try:
            resp: Any = cluster.core.list_namespaced_pod(
                namespace,
                label_selector=selector,
                watch=True,
                resource_version=rv,
                timeout_seconds=max(1, int(remaining + 0.999)),
                _preload_content=False,
                _request_timeout=(10, remaining + 10),
            )
        except ApiException as exc:
            if exc.status == 410:
                continue  # expired already: list again
            raise
        try:
            if _watch_deletions(resp, left):
                return 0
        finally:
            resp.release_conn()


def _watch_deletions(resp: Any, left: set[str]) -> bool:
    """Strike pods off ``left`` as DELETED events arrive; True when none is left. False when
    the stream ended or expired first (the caller lists again)."""
    for lines in _lines_by_chunk(resp):
        for line in lines:
            event = json.loads(line)
            if event.get("type") == "ERROR":
                obj = event.get("object") or {}
                if obj.get("code") == 410:
                    return False  # expired: the caller lists again
                raise ClusterError(
                    f"watching for the deletion of {len(left)} pods: watch error "
                    f"{obj.get('code')}: {obj.get('message')}"
                )
            if event.get("type") == "DELETED":
                left.discard(_pod_name(event.get("object") or {}))
                if not left:
                    return True
    return False


def _lines_by_chunk(resp: Any) -> Iterator[list[bytes]]:
    """A watch stream's non-blank lines (one event each), as each chunk read completes them;
    a line the chunk cut short comes with the next chunk."""
    buf = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        *lines, buf = (buf + chunk).split(b"\n")
        yield [line for line in lines if line.strip()]


# 410 Gone: our resourceVersion is older than the API server keeps, so the watch re-lists and
# re-opens from the list's version. Gone again straight away, over and over, is a broken
# server or proxy: after this many in a row (with a growing pause) the watch gives up.
MAX_GONE_IN_A_ROW = 5
# Other trouble (the stream cannot be opened, the re-list fails, a stream ends at once without
# a single event): retried with a growing pause, given up after this many in a row.
MAX_FAILURES_IN_A_ROW = 12
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0
# A stream that delivered nothing and ended sooner than this after opening was not healthy.
HEALTHY_STREAM_S = 0.5


class PodWatch:
    """A pod watch in a background thread that survives drops without losing events.

    ``start()`` lists (for a resourceVersion) and opens the watch, returning once the API
    server has answered, i.e. the watch is open before the caller's first create. A stream that
    ends is re-opened from the last resourceVersion seen (``restarts``); an expired
    resourceVersion (410 Gone) triggers a re-list whose pods are delivered as RELIST events
    (``relists``), so first-seen times after it are late and the round is marked.

    Every retry waits a growing pause (``sleep``, interruptible by ``stop()``), and trouble
    that repeats without a healthy stream in between ends the watch: ``error`` is set and
    ``on_failure`` is told why, so a waiting caller stops waiting.
    """

    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        selector: str,
        on_event: OnEvent,
        *,
        server_timeout_s: int = 3600,
        clock: Callable[[], float] = time.monotonic,
        start_resource_version: str | None = None,
        on_failure: Callable[[str], None] | None = None,
        sleep: Callable[[float], object] | None = None,
        max_gone: int = MAX_GONE_IN_A_ROW,
        max_failures: int = MAX_FAILURES_IN_A_ROW,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.selector = selector
        self.on_event = on_event
        self.server_timeout_s = server_timeout_s
        self.clock = clock
        self.resource_version = start_resource_version
        self.on_failure = on_failure
        self.max_gone = max_gone
        self.max_failures = max_failures
        self.restarts = 0
        self.relists = 0
        self.last_error: str | None = None
        #: set when the watch gave up; the thread has ended
        self.error: ClusterError | None = None
        self._stop = threading.Event()
        self._sleep: Callable[[float], object] = sleep or self._stop.wait
        self._open = threading.Event()
        self._resp: Any = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._first_error: BaseException | None = None
        self._backoff = BACKOFF_FIRST_S
        self._gone = 0
        self._failures = 0
        self._delivered = 0  # events in the current stream

    # --- control ----------------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> None:
        if self.resource_version is None:
            _, self.resource_version = list_pods(self.cluster, self.namespace, self.selector)
        self._thread = threading.Thread(target=self._run, name="abtest-pod-watch", daemon=True)
        self._thread.start()
        if not self._open.wait(timeout_s):
            self.stop()
            raise ClusterError(
                f"the pod watch on namespace {self.namespace!r} did not open within "
                f"{timeout_s:g} s (last error: {self.last_error})"
            )
        if self._first_error is not None:
            self.stop()
            raise self._first_error

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            resp = self._resp
        if resp is not None:
            # best effort: the socket may be gone already
            with contextlib.suppress(Exception):
                resp.shutdown()
            with contextlib.suppress(Exception):
                resp.release_conn()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> PodWatch:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the thread -------------------------------------------------------------------------

    def _open_stream(self) -> Any:
        return self.cluster.core.list_namespaced_pod(
            self.namespace,
            label_selector=self.selector,
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.server_timeout_s,
            _preload_content=False,
            # the server ends the watch first (timeout_seconds); stop() shuts the socket down
            _request_timeout=(10, self.server_timeout_s + 60),
        )

    def _relist(self) -> None:
        items, rv = list_pods(self.cluster, self.namespace, self.selector)
        now = self.clock()
        for pod in items:
            self.on_event("RELIST", pod, now)
        self.resource_version = rv
        self.relists += 1

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # never leave start() or a waiting caller on a dead thread
            self._give_up(f"{exc!r}")
            raise

    def _give_up(self, why: str) -> None:
        err = ClusterError(f"the pod watch on namespace {self.namespace!r} gave up: {why}")
        self.error = err
        self.last_error = str(err)
        if not self._open.is_set():
            self._first_error = err
            self._open.set()
        if self.on_failure is not None:
            self.on_failure(str(err))

    def _pause(self) -> None:
        """Wait before the next attempt, longer each time until a healthy stream."""
        self._sleep(self._backoff)
        self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)

    def _trouble(self, what: str, *, gone: bool = False) -> bool:
        """Count one failed attempt; False (after giving up) when there were too many."""
        self.last_error = what
        if gone:
            self._gone += 1
            if self._gone > self.max_gone:
                self._give_up(
                    f"410 Gone (resourceVersion expired) {self._gone} times in a row, "
                    "re-listing after each"
                )
                return False
        else:
            self._failures += 1
            if self._failures > self.max_failures:
                self._give_up(f"{self._failures} failed attempts in a row; last: {what}")
                return False
        return True

    def _healthy(self) -> None:
        self._gone = self._failures = 0
        self._backoff = BACKOFF_FIRST_S

    def _recover_from_gone(self, what: str) -> bool:
        """Re-list after a 410 Gone, then pause; False when the watch gave up."""
        if not self._trouble(what, gone=True):
            return False
        try:
            self._relist()
        except ClusterError as err:
            if not self._trouble(f"re-list after 410 Gone failed: {err}"):
                return False
        self._pause()
        return True

    def _loop(self) -> None:
        first = True
        while not self._stop.is_set():
            try:
                resp = self._open_stream()
            except ApiException as exc:
                if exc.status == 410:
                    if not self._recover_from_gone("410 Gone: resourceVersion expired"):
                        return
                    continue
                err = convert(exc)
                if first:  # e.g. 403: the caller hears it from start() at once
                    self.last_error = str(err)
                    self._first_error = err
                    self._open.set()
                    return
                if not self._trouble(str(err)):
                    return
                self._pause()
                continue
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                what = f"cannot open the pod watch: {exc}"
                if first:
                    self.last_error = what
                    self._first_error = ClusterError(what)
                    self._open.set()
                    return
                if not self._trouble(what):
                    return
                self._pause()
                continue
            opened = self.clock()
            with self._lock:
                self._resp = resp
            if self._stop.is_set():
                break
            if not first:
                self.restarts += 1
            first = False
            self._open.set()
            self._delivered = 0
            try:
                gone = self._consume(resp)
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                gone = False
                self.last_error = f"pod watch dropped: {exc}"
            finally:
                with self._lock:
                    self._resp = None
                with contextlib.suppress(Exception):
                    resp.release_conn()
            if self._stop.is_set():
                break
            if self._delivered or self.clock() - opened >= HEALTHY_STREAM_S:
                self._healthy()
            if gone:
                if not self._recover_from_gone(self.last_error or "410 Gone in the stream"):
                    return
            elif not self._delivered and self.clock() - opened < HEALTHY_STREAM_S:
                # ended at once with nothing in it: do not re-open in a tight loop
                if not self._trouble(f"the pod watch stream ended at once ({self.last_error})"):
                    return
                self._pause()

    def _consume(self, resp: Any) -> bool:
        """Read events until the stream ends; True when the server said 410 Gone."""
        for lines in _lines_by_chunk(resp):
            seen = self.clock()
            if self._stop.is_set():
                return False
            for line in lines:
                event = json.loads(line)
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    code = obj.get("code")
                    self.last_error = f"watch error {code}: {obj.get('message')}"
                    return code == 410
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if rv:
                    self.resource_version = str(rv)
                self._delivered += 1  # an event or a bookmark: the stream is healthy
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self.on_event(kind, obj, seen)
        return False
