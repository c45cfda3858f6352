"""Timeouts and bounded retries in the cluster layer (issue 11 item 7), without a cluster.

Sleeps are recorded, not slept: the tests never depend on how fast this machine is.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from abtest.batch.observe import PodTracker
from abtest.batch.spec import RoundSpec
from abtest.cluster import client as client_mod
from abtest.cluster import environment, namespaces, nodes, pods
from abtest.cluster.client import Cluster, connect, node_proxy_get
from abtest.errors import ClusterError

# --- a scripted API server for the watch ------------------------------------------------------


class FakeResp:
    def __init__(self, data: bytes = b"", lines: list[dict[str, Any]] | None = None) -> None:
        self.data = data
        self.lines = lines or []

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        for line in self.lines:
            yield json.dumps(line).encode() + b"\n"

    def release_conn(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


LIST = json.dumps({"items": [], "metadata": {"resourceVersion": "100"}}).encode()
GONE_EVENT = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}


def added(n: int) -> dict[str, Any]:
    return {
        "type": "ADDED",
        "object": {"metadata": {"name": f"p{n}", "resourceVersion": str(200 + n)}},
    }


class FakeCore:
    """Each watch open takes the next step of ``script``: an int is an HTTP error status, a
    list is the events of a stream that then ends. When the script runs out, ``exhausted``
    is called (e.g. to stop the watch) and the open fails with 410."""

    def __init__(self, script: list[int | list[dict[str, Any]]], *, repeat_last: bool) -> None:
        self.script = list(script)
        self.repeat_last = repeat_last
        self.opens = 0
        self.lists = 0
        self.exhausted: Callable[[], None] = lambda: None

    def list_namespaced_pod(self, namespace: str, **kw: Any) -> FakeResp:
        if not kw.get("watch"):
            self.lists += 1
            return FakeResp(LIST)
        self.opens += 1
        if not self.script:
            self.exhausted()
            return FakeResp()
        step = self.script[0] if self.repeat_last and len(self.script) == 1 else self.script.pop(0)
        if isinstance(step, int):
            raise ApiException(status=step, reason="scripted")
        return FakeResp(lines=step)


class FakeCluster:
    def __init__(self, core: FakeCore) -> None:
        self.core = core


def still_clock() -> float:
    return 0.0  # every stream looks short: only counts decide


def make_watch(
    core: FakeCore, sleeps: list[float], **kw: Any
) -> tuple[pods.PodWatch, list[str], list[str]]:
    events: list[str] = []
    failures: list[str] = []
    watch = pods.PodWatch(
        FakeCluster(core),  # type: ignore[arg-type]
        "abtest",
        "app.kubernetes.io/managed-by=abtest",
        lambda kind, obj, seen: events.append(kind),
        clock=still_clock,
        sleep=sleeps.append,
        on_failure=failures.append,
        **kw,
    )
    return watch, events, failures


def test_a_watch_that_always_gets_410_gives_up_with_a_clear_error() -> None:
    sleeps: list[float] = []
    core = FakeCore([410], repeat_last=True)
    watch, _, failures = make_watch(core, sleeps)
    with pytest.raises(ClusterError, match=r"gave up: 410 Gone .* 6 times in a row"):
        watch.start(timeout_s=60)
    assert watch.relists == pods.MAX_GONE_IN_A_ROW
    assert core.opens == pods.MAX_GONE_IN_A_ROW + 1
    # a growing pause before every re-open, not a tight loop
    assert sleeps == [0.1, 0.2, 0.4, 0.8, 1.6]
    assert failures and "410" in failures[0]
    assert watch.error is not None


def test_410_inside_open_streams_ends_the_wait_of_the_round() -> None:
    sleeps: list[float] = []
    core = FakeCore([[GONE_EVENT]], repeat_last=True)
    tracker = PodTracker(["p1"])
    events: list[str] = []
    watch = pods.PodWatch(
        FakeCluster(core),  # type: ignore[arg-type]
        "abtest",
        "sel",
        lambda kind, obj, seen: events.append(kind),
        clock=still_clock,
        sleep=sleeps.append,
        on_failure=tracker.abort,
    )
    watch.start(timeout_s=60)  # the stream opens, then 410 arrives inside it
    # the round's wait returns once the watch gives up (the deadline is far away)
    assert tracker.wait_all_ready(still_clock() + 1e9, still_clock) is False
    watch.stop()
    assert tracker.aborted is not None and "410 Gone" in tracker.aborted
    assert isinstance(watch.error, ClusterError)
    assert len(sleeps) == pods.MAX_GONE_IN_A_ROW
    assert max(sleeps) <= pods.BACKOFF_MAX_S


def test_streams_that_end_at_once_back_off_and_give_up() -> None:
    sleeps: list[float] = []
    core = FakeCore([[]], repeat_last=True)
    watch, _, failures = make_watch(core, sleeps)
    watch.start(timeout_s=60)
    assert watch._thread is not None
    watch._thread.join(timeout=60)
    assert not watch._thread.is_alive()
    assert watch.error is not None and "failed attempts in a row" in str(watch.error)
    assert len(sleeps) == pods.MAX_FAILURES_IN_A_ROW
    assert sleeps[:3] == [0.1, 0.2, 0.4] and max(sleeps) == pods.BACKOFF_MAX_S
    assert failures


def test_a_healthy_stream_resets_the_count() -> None:
    sleeps: list[float] = []
    script: list[int | list[dict[str, Any]]] = [410, 410, 410, [added(1)], 410, 410, 410]
    script += [[added(2)], [], [added(3)]]
    core = FakeCore(script, repeat_last=False)
    watch, events, failures = make_watch(core, sleeps, max_gone=3)
    core.exhausted = watch._stop.set
    watch.start(timeout_s=60)
    assert watch._thread is not None
    watch._thread.join(timeout=60)
    assert watch.error is None and failures == []
    assert watch.relists == 6 and events.count("ADDED") == 3
    # the empty stream (ended at once) after a healthy one waits the first pause again
    assert sleeps == [0.1, 0.2, 0.4, 0.1, 0.2, 0.4, 0.1]


def test_a_first_open_error_still_surfaces_at_once() -> None:
    sleeps: list[float] = []
    watch, _, _ = make_watch(FakeCore([403], repeat_last=True), sleeps)
    with pytest.raises(ClusterError, match="403"):
        watch.start(timeout_s=60)
    assert sleeps == []


# --- every API call has a request timeout -------------------------------------------------------


def _kubeconfig(tmp_path: Path, server: str) -> str:
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return str(path)


@pytest.fixture()
def recording_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Cluster, list[tuple[str, str, Any]]]:
    """A Cluster on a plain ApiClient (no default timeout), whose transport records each
    request's timeout and then fails it like an unreachable server."""
    base = connect(_kubeconfig(tmp_path, "https://127.0.0.1:1"))
    cluster = Cluster(client.ApiClient(base.configuration), None)
    seen: list[tuple[str, str, Any]] = []

    def request(method: str, url: str, *a: Any, _request_timeout: Any = None, **kw: Any) -> Any:
        seen.append((method, url, _request_timeout))
        raise urllib3.exceptions.ProtocolError("recorded, not sent")

    monkeypatch.setattr(cluster.api_client.rest_client, "request", request)
    return cluster, seen


CALLS: dict[str, Callable[[Cluster], object]] = {
    "server_version": environment.server_version,
    "node_facts": lambda c: environment.node_facts(c, "n1"),
    "check_owned": lambda c: namespaces.check_owned(c, "abtest"),
    "ensure_namespace": lambda c: namespaces.ensure_namespace(c, "abtest"),
    "delete_namespace": lambda c: namespaces.delete_namespace(c, "abtest"),
    "node_status": lambda c: nodes.node_status(c, "n1"),
    "configz": lambda c: nodes.configz(c, "n1"),
    "feature_enabled": lambda c: nodes.feature_enabled(c, "n1"),
    "node_proxy_get": lambda c: node_proxy_get(c, "n1", "metrics"),
    "list_pods": lambda c: pods.list_pods(c, "abtest", "a=b"),
    "count_pods": lambda c: pods.count_pods(c, "abtest", "a=b"),
    "list_pod_events": lambda c: pods.list_pod_events(c, "abtest"),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_api_call_passes_a_request_timeout(
    name: str, recording_cluster: tuple[Cluster, list[tuple[str, str, Any]]]
) -> None:
    cluster, seen = recording_cluster
    with pytest.raises(ClusterError):
        CALLS[name](cluster)
    assert seen, "no request was made"
    for method, url, timeout in seen:
        assert timeout is not None, f"{method} {url} has no request timeout"


def test_delete_calls_pass_a_request_timeout(
    recording_cluster: tuple[Cluster, list[tuple[str, str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, seen = recording_cluster
    # the delete itself, past the ownership check (which is tested above)
    monkeypatch.setattr(pods, "check_owned", lambda c, n: None)
    with pytest.raises(ClusterError):
        pods.delete_pods(cluster, "abtest", "app.kubernetes.io/managed-by=abtest,x=y")
    monkeypatch.setattr(namespaces, "_read", lambda c, n: _owned_ns())
    with pytest.raises(ClusterError):
        namespaces.delete_namespace(cluster, "abtest", wait_s=0)
    assert [m for m, _, _ in seen] == ["DELETE", "DELETE"]
    assert all(t is not None for _, _, t in seen)


def _owned_ns() -> Any:
    return client.V1Namespace(
        metadata=client.V1ObjectMeta(
            name="abtest", labels={"app.kubernetes.io/managed-by": "abtest"}
        )
    )


def test_the_client_gives_a_timeout_to_calls_that_forget_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that accepts and never answers: a call without its own timeout ends with a
    ClusterError instead of hanging (the default is shortened for the test)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    try:
        port = srv.getsockname()[1]
        cluster = connect(_kubeconfig(tmp_path, f"http://127.0.0.1:{port}"))
        assert isinstance(cluster.api_client, client_mod.TimedApiClient)
        monkeypatch.setattr(client_mod, "REQUEST_TIMEOUT", (1.0, 0.5))
        # called without _request_timeout, as a forgotten call site would
        with pytest.raises(ClusterError, match=r"(?i)timed? ?out"):
            client_mod.api_call(lambda: cluster.core.read_namespace("abtest"))()
        assert accepted, "the request never reached the silent server"
    finally:
        srv.close()
        for conn in accepted:
            conn.close()


def test_ensure_namespace_waits_with_a_deadline_and_says_for_what(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminating = _owned_ns()
    terminating.metadata.deletion_timestamp = "2026-01-01T00:00:00Z"
    monkeypatch.setattr(namespaces, "_read", lambda c, n: terminating)
    monkeypatch.setattr(time, "sleep", lambda s: None)
    ticks = iter(range(0, 10_000, 1))
    monkeypatch.setattr(time, "monotonic", lambda: float(next(ticks)))
    with pytest.raises(
        ClusterError, match=r"'abtest' is not usable after waiting 5 s.*terminating"
    ):
        namespaces.ensure_namespace(None, "abtest", timeout_s=5)  # type: ignore[arg-type]


def test_a_round_whose_watch_gives_up_fails_and_still_deletes_its_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The round does not sit out its timeout on a dead watch, and is not recorded as if it
    had measured: it raises the watch's error after deleting its pods."""
    from abtest.batch.round import run_round
    from abtest.batch.round_pods import ClusterPods
    from abtest.config.playbook import Generator
    from abtest.testing import FakePods

    class RealWatch(FakePods):
        """Fake creates and delete, the real pod watch (on the fake API server below)."""

        def __init__(self, cluster: Any) -> None:
            super().__init__(ready=False)
            self.real = ClusterPods(cluster)

        def watch(self, *a: Any, **kw: Any) -> Any:
            return self.real.watch(*a, **kw)

    monkeypatch.setattr(pods, "BACKOFF_FIRST_S", 0.001)
    core = FakeCore([[GONE_EVENT]], repeat_last=True)
    cluster = FakeCluster(core)
    fake = RealWatch(cluster)
    with pytest.raises(ClusterError, match="gave up: 410 Gone"):
        run_round(
            cluster,  # type: ignore[arg-type]
            RoundSpec(
                node_name="n1",
                namespace="abtest",
                size=1,
                run_id="r",
                generator=Generator(timeout_s=120.0, observe_s=0.0),
                scrape_metrics=False,
            ),
            pods=fake,
        )
    deleted = fake.deleted
    assert len(deleted) == 1 and "app.kubernetes.io/managed-by=abtest" in deleted[0]


def test_delete_namespace_without_waiting_reads_it_once_and_does_not_poll(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """wait_s=None: the ownership check and the delete, then no wait for the namespace
    controller; the default waits until a read finds it gone."""
    reads: list[str] = []
    deletes: list[str] = []

    def read(c: Any, n: str) -> Any:
        reads.append(n)
        return _owned_ns() if len(reads) < 3 else None

    core = types.SimpleNamespace(delete_namespace=lambda n, **kw: deletes.append(n))
    cluster = cast(Cluster, types.SimpleNamespace(core=core))
    monkeypatch.setattr(namespaces, "_read", read)
    monkeypatch.setattr(time, "sleep", lambda s: None)
    namespaces.delete_namespace(cluster, "abtest", wait_s=None)
    assert (reads, deletes) == (["abtest"], ["abtest"])
    namespaces.delete_namespace(cluster, "abtest")
    assert len(reads) == 3 and deletes == ["abtest", "abtest"]
