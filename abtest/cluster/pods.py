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
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from abtest.cluster.client import Cluster, api_call, convert
from abtest.cluster.namespaces import MANAGED_BY, MANAGED_BY_KEY, check_owned
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


@api_call
def list_pod_events(
    cluster: Cluster, namespace: str, pod_names: set[str] | None = None
) -> list[dict[str, Any]]:
    """core/v1 Events about pods in ``namespace`` (only the named pods, when given)."""
    resp = cluster.core.list_namespaced_event(
        namespace,
        field_selector="involvedObject.kind=Pod",
        _preload_content=False,
        _request_timeout=30,
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


class PodWatch:
    """A pod watch in a background thread that survives drops without losing events.

    ``start()`` lists (for a resourceVersion) and opens the watch, returning once the API
    server has answered, i.e. the watch is open before the caller's first create. A stream that
    ends is re-opened from the last resourceVersion seen (``restarts``); an expired
    resourceVersion (410 Gone) triggers a re-list whose pods are delivered as RELIST events
    (``relists``), so first-seen times after it are late and the round is marked.
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
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.selector = selector
        self.on_event = on_event
        self.server_timeout_s = server_timeout_s
        self.clock = clock
        self.resource_version = start_resource_version
        self.restarts = 0
        self.relists = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._open = threading.Event()
        self._resp: Any = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._first_error: BaseException | None = None

    # --- control ----------------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> None:
        if self.resource_version is None:
            _, self.resource_version = list_pods(self.cluster, self.namespace, self.selector)
        self._thread = threading.Thread(target=self._run, name="abtest-pod-watch", daemon=True)
        self._thread.start()
        if not self._open.wait(timeout_s):
            self.stop()
            raise ClusterError(f"pod watch did not open within {timeout_s} s: {self.last_error}")
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
        except BaseException as exc:  # never leave start() waiting on a dead thread
            self.last_error = f"pod watch failed: {exc!r}"
            if not self._open.is_set():
                self._first_error = exc
                self._open.set()
            raise

    def _loop(self) -> None:
        backoff = 0.1
        first = True
        while not self._stop.is_set():
            try:
                resp = self._open_stream()
            except ApiException as exc:
                if exc.status == 410:
                    self.last_error = "410 Gone: resourceVersion expired"
                    try:
                        self._relist()
                    except ClusterError as err:
                        self.last_error = str(err)
                    continue
                self.last_error = str(convert(exc))
                if first:
                    self._first_error = convert(exc)
                    self._open.set()
                    return
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                self.last_error = f"cannot open the pod watch: {exc}"
                if first:
                    self._first_error = ClusterError(self.last_error)
                    self._open.set()
                    return
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            with self._lock:
                self._resp = resp
            if self._stop.is_set():
                break
            if not first:
                self.restarts += 1
            first = False
            self._open.set()
            backoff = 0.1
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
            if gone and not self._stop.is_set():
                try:
                    self._relist()
                except ClusterError as err:
                    self.last_error = str(err)
                    self._stop.wait(backoff)

    def _consume(self, resp: Any) -> bool:
        """Read events until the stream ends; True when the server said 410 Gone."""
        buf = b""
        for chunk in resp.stream(amt=None, decode_content=False):
            seen = self.clock()
            if self._stop.is_set():
                return False
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
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
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self.on_event(kind, obj, seen)
        return False
