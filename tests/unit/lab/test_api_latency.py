"""`lab up --api-latency MS[:JITTER]` without a lab: what it accepts, the one line a bad value
gets, the kubeconfigs (only the kubelets' go through the proxy), the toxic it asks toxiproxy
for, and where `lab status` shows it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bad_input import Case, run_case

from abtest.config.api_faults import MAX_KIB, MIN_KIB, ApiFaults, parse_api_faults
from abtest.config.api_latency import MAX_MS, ApiLatency, parse_api_latency
from abtest.errors import UserError
from abtest.lab import api_proxy, control_plane, pki
from abtest.lab.layout import LabState, Paths
from abtest.lab.status import LabStatus

PORTS = {"apiserver": 6443, "api_proxy": 6444, "api_proxy_admin": 8474}


@pytest.mark.parametrize(
    ("text", "ms", "jitter"),
    [("0", 0, 0), ("20", 20, 0), ("20:5", 20, 5), (" 7 ", 7, 0), (str(MAX_MS), MAX_MS, 0)],
)
def test_accepted_settings(text: str, ms: int, jitter: int) -> None:
    assert parse_api_latency(text) == ApiLatency(ms, jitter)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("abc", "is not ms[:jitter]"),
        ("-5", "is not ms[:jitter]"),
        ("5:", "is not ms[:jitter]"),
        ("1.5", "is not ms[:jitter]"),
        ("", "is not ms[:jitter]"),
        (str(MAX_MS + 1), "more than the 5000 ms allowed"),
        ("10:20", "jitter 20 ms is more than the latency 10 ms"),
    ],
)
def test_refused_settings(text: str, words: str) -> None:
    with pytest.raises(UserError) as exc:
        parse_api_latency(text)
    assert exc.value.where == "--api-latency"
    assert words in str(exc.value).lower()


@pytest.mark.parametrize("value", ["abc", "6000", "3:4"])
def test_a_bad_value_is_one_line_before_anything_runs(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The option's callback refuses it: `lab up` never starts (it would need root)."""
    case = Case(f"api-latency-{value}", ("lab", "up", "--api-latency", value), ("--api-latency",))
    run_case(case, tmp_path, capsys)


def _server(path: Path) -> str:
    return next(line.split()[1] for line in path.read_text().splitlines() if "server:" in line)


def test_only_the_kubelets_kubeconfig_names_the_proxy(tmp_path: Path) -> None:
    paths = Paths(root=tmp_path / "state", run=tmp_path / "run")
    ca = pki.ensure_ca(paths.pki)
    for name in ("admin", "scheduler", "controller-manager", "kubelet"):
        pki.issue(ca, paths.pki, name, name, client=True)
    control_plane.write_kubeconfigs(paths, PORTS, ca)
    assert _server(paths.root / "kubelet.kubeconfig") == "https://127.0.0.1:6444"
    for direct in ("admin", "scheduler", "controller-manager"):
        assert _server(paths.root / f"{direct}.kubeconfig") == "https://127.0.0.1:6443"


def test_the_proxy_listens_on_loopback_in_front_of_the_api_server() -> None:
    (proxy,) = json.loads(api_proxy.config_text(PORTS))
    assert proxy == {
        "name": "kube-apiserver",
        "listen": "127.0.0.1:6444",
        "upstream": "127.0.0.1:6443",
        "enabled": True,
    }


def test_the_toxic_is_downstream_latency_and_removed_at_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, str, Any]] = []

    def call(ports: dict[str, int], path: str, method: str = "GET", body: Any = None) -> Any:
        calls.append((method, path, body))
        return None

    monkeypatch.setattr(api_proxy, "_call", call)
    api_proxy.set_latency(PORTS, ApiLatency(50, 5))
    assert calls[0][:2] == ("DELETE", "/proxies/kube-apiserver/toxics/api-latency")
    method, path, body = calls[1]
    assert (method, path) == ("POST", "/proxies/kube-apiserver/toxics")
    assert body["type"] == "latency" and body["stream"] == "downstream"
    assert body["attributes"] == {"latency": 50, "jitter": 5}
    calls.clear()
    api_proxy.set_latency(PORTS, ApiLatency(0, 0))
    assert [c[0] for c in calls] == ["DELETE"]


def test_the_setting_is_kept_in_the_lab_state_and_shown_by_status(tmp_path: Path) -> None:
    paths = Paths(root=tmp_path / "state", run=tmp_path / "run")
    paths.root.mkdir(parents=True)
    assert api_proxy.stored(paths) == ApiLatency()
    LabState(nodes=2).save(paths)
    api_proxy.record(paths, ApiLatency(20, 5))
    state = LabState.load(paths)
    assert state is not None and state.nodes == 2  # the rest of the state is kept
    assert api_proxy.stored(paths) == ApiLatency(20, 5)
    st = LabStatus(True, True, "n", "k", "s", (), api_latency_ms=20, api_jitter_ms=5)
    out = st.as_json()
    assert (out["api_latency_ms"], out["api_jitter_ms"]) == (20, 5)
    assert str(ApiLatency(20, 5)) == "20 ms +/- 5 ms" and str(ApiLatency()) == "0 ms"


def test_a_run_records_the_delay_only_when_its_kubelet_goes_through_the_lab_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's environment gets the running proxy's setting for a lab node reached with the
    lab's admin kubeconfig; another cluster, the systemd node and a lab from before the proxy
    (its kubelet's kubeconfig names the API server) get nothing; a proxy that does not answer
    is recorded as such."""
    paths = Paths(root=tmp_path / "state", run=tmp_path / "run")
    ca = pki.ensure_ca(paths.pki)
    for name in ("admin", "scheduler", "controller-manager", "kubelet"):
        pki.issue(ca, paths.pki, name, name, client=True)
    control_plane.write_kubeconfigs(paths, PORTS, ca)
    admin = str(paths.kubeconfig)
    monkeypatch.setattr(api_proxy, "current_latency", lambda ports: ApiLatency(10, 2))
    monkeypatch.setattr(api_proxy, "current_faults", lambda ports: ApiFaults())
    assert api_proxy.run_env(admin, "abtest-lab", paths) == {}  # no lab state: not up
    LabState(ports=dict(PORTS)).save(paths)
    found = api_proxy.run_env(admin, "abtest-lab", paths)
    assert found == {"api_latency": {"ms": 10, "jitter_ms": 2, "through": "https://127.0.0.1:6444"}}
    assert api_proxy.run_env(str(tmp_path / "other.kubeconfig"), "abtest-lab", paths) == {}
    assert api_proxy.run_env(None, "abtest-lab", paths) == {}
    assert api_proxy.run_env(f"{tmp_path}/other.kubeconfig:{admin}", "abtest-lab", paths) == found
    assert api_proxy.run_env(admin, "abtest-lab-systemd", paths) == {}
    monkeypatch.setattr(api_proxy, "current_faults", lambda ports: ApiFaults(8))
    assert api_proxy.run_env(admin, "abtest-lab", paths)["api_faults"] == {"cut_after_kib": 8}

    def refused(ports: dict[str, int]) -> ApiLatency:
        raise ConnectionRefusedError("connection refused")

    monkeypatch.setattr(api_proxy, "current_latency", refused)
    assert api_proxy.run_env(admin, "abtest-lab", paths)["api_latency"]["error"]
    control_plane.write_kubeconfigs(paths, PORTS | {"api_proxy": 6443}, ca)  # before the proxy
    assert api_proxy.run_env(admin, "abtest-lab", paths) == {}


@pytest.mark.parametrize(
    ("text", "kib"), [("0", 0), (str(MIN_KIB), MIN_KIB), (" 8 ", 8), (str(MAX_KIB), MAX_KIB)]
)
def test_accepted_fault_settings(text: str, kib: int) -> None:
    assert parse_api_faults(text) == ApiFaults(kib)


@pytest.mark.parametrize("text", ["abc", "-1", "1.5", "", "1", str(MIN_KIB - 1), str(MAX_KIB + 1)])
def test_refused_fault_settings(text: str) -> None:
    with pytest.raises(UserError) as exc:
        parse_api_faults(text)
    assert exc.value.where == "--api-faults"


def test_a_bad_fault_setting_is_one_line_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = Case("api-faults-2", ("lab", "up", "--api-faults", "2"), ("--api-faults",))
    run_case(case, tmp_path, capsys)


def test_the_fault_toxic_cuts_the_kubelets_requests_and_is_removed_at_zero(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """limit_data on the upstream stream of every connection (toxicity 1: the kubelet keeps
    its one connection, so a per-connection dice roll would fail all or nothing); kept in
    the state beside the latency and shown by status."""
    calls: list[tuple[str, str, Any]] = []

    def call(ports: dict[str, int], path: str, method: str = "GET", body: Any = None) -> Any:
        calls.append((method, path, body))
        return None

    monkeypatch.setattr(api_proxy, "_call", call)
    api_proxy.set_faults(PORTS, ApiFaults(8))
    assert calls[0][:2] == ("DELETE", "/proxies/kube-apiserver/toxics/api-faults")
    _, _, body = calls[1]
    assert (body["type"], body["stream"], body["toxicity"]) == ("limit_data", "upstream", 1.0)
    assert body["attributes"] == {"bytes": 8 * 1024}
    calls.clear()
    api_proxy.set_faults(PORTS, ApiFaults())
    assert [c[0] for c in calls] == ["DELETE"]
    paths = Paths(root=tmp_path / "state", run=tmp_path / "run")
    paths.root.mkdir(parents=True)
    api_proxy.record(paths, ApiLatency(20), ApiFaults(16))
    api_proxy.record(paths, None, None)  # neither given: both kept
    assert (api_proxy.stored(paths), api_proxy.stored_faults(paths)) == (
        ApiLatency(20),
        ApiFaults(16),
    )
    st = LabStatus(True, True, "n", "k", "s", (), api_faults_kib=16)
    assert st.as_json()["api_faults_kib"] == 16
