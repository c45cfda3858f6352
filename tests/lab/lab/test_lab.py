"""The lab is the real thing: upstream control plane, kubelet, containerd, real pods."""

from __future__ import annotations

import json
import pwd
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client, config

from abtest.errors import LabError
from abtest.lab import host, layout, sshd
from abtest.lab.binaries import CONTAINERD_VERSION
from abtest.lab.layout import LabState
from abtest.lab.processes import free_port, start, wait_until
from abtest.lab.status import status

pytestmark = pytest.mark.lab


def _core() -> client.CoreV1Api:
    # the kubernetes client leaves this one unannotated
    new_client: Callable[[str], client.ApiClient] = config.new_client_from_config
    return client.CoreV1Api(new_client(str(layout.Paths().kubeconfig)))


def test_status_reports_every_component_healthy_and_node_ready(lab_up: None) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "abtest", "lab", "status", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    st = json.loads(proc.stdout)
    assert st["ready"] is True and st["node"] == layout.NODE_NAME
    assert Path(st["kubeconfig"]).is_file()
    for name in ("etcd", "kube-apiserver", "kube-scheduler", "kubelet", "containerd", "sshd"):
        assert st["components"][name]["healthy"] is True, name
        assert isinstance(st["components"][name]["pid"], int)
    node = _core().read_node(layout.NODE_NAME)
    assert node.status is not None and node.status.node_info is not None
    # the release the lab runs, as its status says and as the API server and the node report
    assert st["kubernetes"] == st["api_server_version"] == node.status.node_info.kubelet_version
    assert st["nodes"][0]["kubelet_version"] == st["kubernetes"]
    # the lab's own containerd build, as the kubelet reports it on the Node object (the
    # kubelet drops the tag's "v") and as its CRI Version call does in `lab status`
    assert node.status.node_info.container_runtime_version == "containerd://1.7.28"
    assert st["nodes"][0]["containerd_version"] == CONTAINERD_VERSION == "v1.7.28"


def test_containerd_reports_no_deprecated_config_or_call(lab_up: None) -> None:
    """containerd 1.7 records a warning for each deprecated config key it read and each
    deprecated call it served (the CRI v1alpha2 API among them); the lab causes none."""
    sock = layout.Paths().containerd_socket
    proc = subprocess.run(
        [str(layout.Paths().bin / "ctr"), "--address", str(sock), "deprecations", "list"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", proc.stdout


def test_lab_up_on_a_running_lab_changes_nothing(lab_up: None) -> None:
    before = {c.name: c.pid for c in status().components}
    proc = subprocess.run(
        [sys.executable, "-m", "abtest", "lab", "up"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "already up" in proc.stdout
    assert {c.name: c.pid for c in status().components} == before


def test_a_busybox_pod_from_the_lab_image_becomes_ready(lab_up: None) -> None:
    core = _core()
    ns = f"abtest-labtest-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    try:
        # The default service account appears asynchronously (controller-manager).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if core.list_namespaced_service_account(ns).items:
                break
            time.sleep(0.5)
        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(name="probe"),
            spec=client.V1PodSpec(
                containers=[
                    client.V1Container(
                        name="c",
                        image=layout.BUSYBOX_IMAGE,
                        command=["sleep", "3600"],
                        image_pull_policy="IfNotPresent",
                    )
                ],
                automount_service_account_token=False,
                termination_grace_period_seconds=1,
            ),
        )
        core.create_namespaced_pod(ns, pod)
        deadline = time.monotonic() + 90
        ready = False
        while time.monotonic() < deadline and not ready:
            p = core.read_namespaced_pod("probe", ns)
            assert p.status is not None
            ready = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            time.sleep(0.3)
        assert ready, f"pod not Ready: {p.status}"
        assert p.spec is not None and p.status is not None and p.status.container_statuses
        assert p.spec.node_name == layout.NODE_NAME
        assert p.status.container_statuses[0].restart_count == 0
    finally:
        core.delete_namespace(ns)


def test_free_port_avoids_a_taken_port() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        assert free_port(taken) != taken
    assert free_port(None, taken={taken}) != taken


def test_a_component_that_dies_during_start_shows_its_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "boom.log"
    pid = start("boom", ["sh", "-c", "echo fatal: cannot bind; exit 3"], log, tmp_path)
    assert (tmp_path / "boom.pid").read_text().strip() == str(pid)
    from abtest.lab.processes import alive

    with pytest.raises(LabError) as err:
        wait_until("boom", lambda: False, 30, still_running=lambda: alive(pid), log=log)
    assert "died during start-up" in str(err.value) and "fatal: cannot bind" in str(err.value)


def _abtest(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "abtest", *args], capture_output=True, text=True, timeout=timeout
    )


def test_down_puts_back_what_up_changed_then_up_brings_it_back(lab_up: None) -> None:
    """Issue 11 item 10, end to end: `down` leaves nothing of the lab on the host but the
    state directory it keeps on purpose (listed as kept), puts ip_forward back to what `up`
    found, and `up` afterwards gives a healthy lab again (the next tests depend on it)."""
    paths = layout.Paths()
    state = LabState.load(paths)
    assert state is not None and state.ip_forward_before is not None, "up did not remember it"
    found = state.ip_forward_before
    assert host.IP_FORWARD.read_text().strip() == "1"
    assert sshd.SUDOERS.exists() and layout.HOSTS_MARK in host.HOSTS.read_text()
    try:
        down = _abtest("lab", "down")
        assert down.returncode == 0, down.stdout + down.stderr
        st = json.loads(_abtest("lab", "status", "--json").stdout)
        assert st["up"] is False
        assert st["left_behind"] == []
        assert len(st["kept"]) == 1 and str(paths.root) in st["kept"][0]
        assert host.IP_FORWARD.read_text().strip() == found
        assert not sshd.SUDOERS.exists()
        with pytest.raises(KeyError):
            pwd.getpwnam(layout.SSH_USER)
        assert layout.HOSTS_MARK not in host.HOSTS.read_text()
        for name in state.mounted_cgroups:
            assert not host.is_mount_point(host.CGROUP_ROOT / name), name
        assert not paths.run.exists()
        text = _abtest("lab", "status")
        assert "left behind" not in text.stdout and "kept" in text.stdout
    finally:
        up = _abtest("lab", "up")
        assert up.returncode == 0, up.stdout + up.stderr
    after = status()
    assert after.up and after.ready and all(c.healthy for c in after.components)
    again = LabState.load(paths)
    assert again is not None and again.ip_forward_before == found
