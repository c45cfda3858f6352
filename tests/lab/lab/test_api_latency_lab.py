"""`lab up --api-latency` on the running lab (issue 45 section 1): the kubelet's requests take
about the setting longer, as the kubelet itself measures them, the generator's direct path
does not, `lab status` shows it, and 0 puts the lab back. Nothing restarts: one `up` call each
way, and one node-lease renewal (every 10 s) watched at 50 ms."""

from __future__ import annotations

import http.client
import json
import re
import ssl
import statistics
import subprocess
import sys
import time
import urllib.request

import pytest

from abtest.config.api_latency import ApiLatency
from abtest.lab import api_proxy, layout
from abtest.lab.layout import LabState

pytestmark = pytest.mark.lab

SET_MS = 50
LEASE_WAIT_S = 25.0  # the kubelet renews its lease every 10 s; only a failure waits this long
PUT = re.compile(
    r'^rest_client_request_duration_seconds_(sum|count)\{[^}]*verb="PUT"[^}]*\}\s+(\S+)$', re.M
)


def _abtest(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "abtest", *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def _ctx(paths: layout.Paths, who: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(paths.pki / "ca.crt"))
    ctx.load_cert_chain(str(paths.pki / f"{who}.crt"), str(paths.pki / f"{who}.key"))
    return ctx


def _median_get_ms(paths: layout.Paths, port: int, n: int = 8) -> float:
    """A GET of the node object as the kubelet (its certificate), on one kept connection."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=_ctx(paths, "kubelet"))
    times = []
    try:
        for i in range(n + 1):
            t0 = time.perf_counter()
            conn.request("GET", f"/api/v1/nodes/{layout.NODE_NAME}")
            conn.getresponse().read()
            if i:  # the first pays the TLS handshake
                times.append((time.perf_counter() - t0) * 1000)
    finally:
        conn.close()
    return statistics.median(times)


def _kubelet_puts(paths: layout.Paths, ports: dict[str, int]) -> tuple[float, float]:
    """The kubelet's own rest_client_request_duration_seconds for PUT (its lease renewals):
    (sum in seconds, count), read through the API server's node proxy."""
    url = f"https://127.0.0.1:{ports['apiserver']}/api/v1/nodes/{layout.NODE_NAME}/proxy/metrics"
    with urllib.request.urlopen(url, timeout=10, context=_ctx(paths, "admin")) as resp:
        text = resp.read().decode()
    found = {kind: float(value) for kind, value in PUT.findall(text)}
    return found["sum"], found["count"]


def _next_puts_mean_ms(paths: layout.Paths, ports: dict[str, int]) -> float:
    """The mean duration of the kubelet's lease renewals from now until at least one more. A
    kubelet restarted meanwhile (an experiment's, through its profile) starts its histogram
    from zero: then what it counts is all since its start, all through the delay too, its
    new connection's TLS handshake (one more round trip or two) included."""
    sum0, count0 = _kubelet_puts(paths, ports)
    deadline = time.monotonic() + LEASE_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(1.0)
        total, count = _kubelet_puts(paths, ports)
        if count < count0:
            sum0 = count0 = 0
        if count > count0:
            return (total - sum0) / (count - count0) * 1000
    raise AssertionError(f"no lease renewal by the kubelet in {LEASE_WAIT_S:.0f} s")


def _status() -> dict[str, object]:
    return dict(json.loads(_abtest("lab", "status", "--json")))


def test_api_latency_slows_the_kubelets_path_only_and_goes_back(lab_up: None) -> None:
    paths = layout.Paths()
    state = LabState.load(paths)
    assert state is not None
    ports, before = state.ports, api_proxy.stored(paths)
    assert before == ApiLatency(), "the lab tests run at --api-latency 0"
    pids = {name: c["pid"] for name, c in _status()["components"].items()}  # type: ignore[attr-defined]
    base_proxy = _median_get_ms(paths, ports["api_proxy"])
    try:
        _abtest("lab", "up", "--api-latency", str(SET_MS))
        st = _status()
        assert (st["api_latency_ms"], st["api_jitter_ms"]) == (SET_MS, 0)
        assert api_proxy.current_latency(ports) == ApiLatency(SET_MS)
        # what a run's environment records on this lab now (issue 45: the report's Method)
        recorded = api_proxy.run_env(str(paths.kubeconfig), layout.NODE_NAME)
        assert recorded["api_latency"]["ms"] == SET_MS
        slow = _median_get_ms(paths, ports["api_proxy"])
        direct = _median_get_ms(paths, ports["apiserver"])
        # the kubelet's own view: its next lease renewal(s) through the proxy
        put_ms = _next_puts_mean_ms(paths, ports)
    finally:
        _abtest("lab", "up", "--api-latency", "0")
    print(f"GET through the proxy {base_proxy:.1f} -> {slow:.1f} ms, direct {direct:.1f} ms; "
          f"kubelet lease PUT mean at {SET_MS} ms: {put_ms:.1f} ms")  # fmt: skip
    # the delay is a floor under every response; the unloaded path's own time comes on top
    # (a loaded machine inflates the 0 ms sample too, so the difference is no floor)
    assert SET_MS * 0.95 <= slow <= base_proxy + SET_MS + 30
    assert direct < SET_MS - 5 + base_proxy, "the direct path got the delay too"
    # at least the delay; the upper bound leaves room for a new connection's handshakes
    assert SET_MS * 0.95 <= put_ms <= 4 * SET_MS + 100
    after = _status()
    assert after["up"] and after["ready"]
    assert (after["api_latency_ms"], after["api_jitter_ms"]) == (0, 0)
    assert api_proxy.current_latency(ports) == ApiLatency()
    # nothing was restarted: every component has the pid it had (the kubelet is left out: an
    # experiment on the shared lab may restart it, and `up` never does)
    now = {n: c["pid"] for n, c in after["components"].items()}  # type: ignore[attr-defined]
    assert {n: p for n, p in now.items() if n != "kubelet"} == {
        n: p for n, p in pids.items() if n != "kubelet"
    }
    assert _median_get_ms(paths, ports["api_proxy"]) < base_proxy + SET_MS / 2
