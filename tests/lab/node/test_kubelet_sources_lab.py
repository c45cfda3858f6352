"""Where the kubelet's settings come from, read over real SSH on the real lab node (issue 14).

The lab kubelet runs with --config and no flag or drop-in that sets a factor, so it is the
no-conflict case. The conflict cases use a process this test starts on the node with a
kubeadm-like command line (a gate in KUBELET_EXTRA_ARGS, --config-dir with a drop-in that
sets a field), found through the profile's ``kubelet.pid_command``: pre-flight reads its
/proc/PID/cmdline and the drop-in files over SSH and refuses, nothing changed.

Run under the lab lock:
``flock /tmp/abtest-lab.lock pytest -m lab tests/lab/node/test_kubelet_sources_lab.py``.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from abtest.config.playbook import NodeProfile
from abtest.errors import UserError
from abtest.node import kubelet_sources as ks
from abtest.node import preflight
from abtest.node.control import NodeController
from abtest.node.lock import NodeLock
from abtest.node.session import NodeSession
from abtest.store.db import Store
from abtest.store.journal import Journal

pytestmark = pytest.mark.lab

GATE = "featureGates.ContainerCheckpoint"  # a lab factor (gates/lab.yaml)
FIELD = "kubeAPIQPS"  # a lab factor (gates/lab.yaml)
LAB_PIDFILE = Path("/run/abtest-lab/pids/kubelet.pid")


def _sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_lab_kubelet_is_found_and_nothing_overrides_the_lab_factors(
    lab_profile: NodeProfile,
) -> None:
    with NodeSession(lab_profile) as node:
        sources, mismatch = ks.read_sources(node)
    assert mismatch is None
    assert sources.pid == int(LAB_PIDFILE.read_text().strip())
    assert sources.config_file == lab_profile.kubelet_config_path
    assert sources.argv[0] == lab_profile.kubelet_binary_path
    assert sources.value("kubeconfig")  # a real flag read back from /proc/PID/cmdline
    assert ks.conflicts(sources, [GATE, FIELD]) == []


@pytest.fixture()
def fake_kubelet(tmp_path: Path, lab_profile: NodeProfile) -> Iterator[tuple[NodeProfile, Path]]:
    """A process with a kubeadm-like kubelet command line, and a drop-in directory."""
    conf_d = tmp_path / "kubelet.conf.d"
    conf_d.mkdir()
    head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
    (conf_d / "10-api.conf").write_text(head + f"{FIELD}: 20\n")
    (conf_d / "20-pods.conf").write_text(head + "maxPods: 110\n")
    argv = [
        sys.executable,
        "-c",
        "import time; time.sleep(120)",
        f"--config={lab_profile.kubelet_config_path}",
        "--kubeconfig=/etc/kubernetes/kubelet.conf",
        f"--config-dir={conf_d}",
        f"--feature-gates={GATE.split('.', 1)[1]}=false",
    ]
    proc = subprocess.Popen(argv)
    pidfile = tmp_path / "kubelet.pid"
    pidfile.write_text(f"{proc.pid}\n")
    try:
        yield replace(lab_profile, pid_command=f"cat {pidfile}"), conf_d
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_preflight_refuses_a_gate_set_by_a_flag_and_a_field_set_by_a_dropin(
    fake_kubelet: tuple[NodeProfile, Path], store: Store
) -> None:
    profile, conf_d = fake_kubelet
    config_before = _sha(profile.kubelet_config_path)
    kubelet_before = LAB_PIDFILE.read_text()
    report = preflight.check(profile, {GATE: True, FIELD: 7}, store=store)
    items = {i.name: i for i in report.items}
    assert not report.ok
    sources = items["kubelet sources"]
    assert not sources.ok
    assert f"{GATE} is set on the kubelet's command line by `--feature-gates=" in sources.detail
    assert f"{FIELD} is set by the drop-in {conf_d}/10-api.conf" in sources.detail
    assert profile.kubelet_config_path in sources.detail
    # the other checks ran and passed: only the sources refuse
    assert [i.name for i in report.items if not i.ok] == ["kubelet sources"]
    # nothing changed on the node
    assert _sha(profile.kubelet_config_path) == config_before
    assert LAB_PIDFILE.read_text() == kubelet_before


def test_preflight_passes_factors_no_flag_or_dropin_sets(
    fake_kubelet: tuple[NodeProfile, Path], store: Store
) -> None:
    profile, _ = fake_kubelet
    report = preflight.check(profile, {"featureGates.PLEGOnDemandRelist": False}, store=store)
    sources = {i.name: i for i in report.items}["kubelet sources"]
    assert sources.ok, sources.detail
    assert "10-api.conf, 20-pods.conf" in sources.detail


def test_node_apply_refuses_an_overridden_factor_before_any_change(
    fake_kubelet: tuple[NodeProfile, Path], store: Store
) -> None:
    """`abtest node apply` does not run the pre-flight: its controller refuses by itself,
    before writing or restarting (no "configz has X, expected Y" and rollback later)."""
    profile, _ = fake_kubelet
    config_before = _sha(profile.kubelet_config_path)
    kubelet_before = LAB_PIDFILE.read_text()
    with NodeController(profile, store) as ctl, pytest.raises(UserError) as err:
        ctl.apply({GATE: True})
    assert f"{GATE} is set on the kubelet's command line by `--feature-gates=" in str(err.value)
    assert err.value.exit_code == 2
    assert _sha(profile.kubelet_config_path) == config_before
    assert LAB_PIDFILE.read_text() == kubelet_before
    assert Journal(store).pending(profile.node_name) is None
    with NodeSession(profile) as node:
        lock = NodeLock(node.ssh, profile.lock_path, sudo=profile.sudo).read()
    assert lock is None
