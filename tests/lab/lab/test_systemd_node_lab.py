"""The lab's systemd node end to end: a kubeadm-shaped node whose kubelet is a
systemd unit, driven by the node layer through the profile the lab writes from the shipped
playbooks/nodes/kubeadm-systemd.yaml.

The module fixture adds the node to the running lab (`abtest lab up --systemd-node`; the
first run builds its image, ~4 min) and takes it away again (`abtest lab up`), so the other
lab tests find the default lab. Every test leaves the kubelet's files byte-identical, the
lock free and the unit active. Alone: ``.venv/bin/python -m pytest -q -m lab
tests/lab/lab/test_systemd_node_lab.py``.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_playbooks import quick_copy
from sweep_signal import sigterm_once_every_node_measured

from abtest.cluster.client import connect
from abtest.cluster.nodes import configz, feature_enabled
from abtest.config.playbook import NodeProfile, load_profile
from abtest.errors import UserError
from abtest.lab import sdnode, sdnode_run
from abtest.lab import sdnode_files as sf
from abtest.lab.layout import Paths
from abtest.node import preflight
from abtest.node import remote_files as rf
from abtest.node.applied import applied
from abtest.node.control import NodeController
from abtest.node.lock import NodeLock
from abtest.node.records import RolledBack
from abtest.node.session import NodeSession
from abtest.store.db import Store
from abtest.store.journal import RESTORED, Journal

pytestmark = pytest.mark.lab

GATE = "featureGates.ContainerCheckpoint"  # default true in v1.36; kubeadm's config sets none
FIELD = "kubeAPIQPS"  # kubeadm's config leaves it at the default (50)
# The files a test may change; each must be byte-identical after every test.
WATCHED = (sf.KUBELET_CONFIG, sf.KUBEADM_FLAGS, sf.DEFAULT_KUBELET)


def _abtest(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "abtest", *args], capture_output=True, text=True, timeout=timeout
    )


def _status() -> dict[str, Any]:
    return dict(json.loads(_abtest("lab", "status", "--json").stdout))


@pytest.fixture(scope="module")
def systemd_node(lab_up: None) -> Iterator[NodeProfile]:
    try:
        t0 = time.monotonic()
        proc = _abtest("lab", "up", "--systemd-node")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        print(f"lab up --systemd-node on a running lab: {time.monotonic() - t0:.1f} s")
        yield load_profile(str(sdnode.SystemdNode(Paths()).profile))
    finally:
        back = _abtest("lab", "up")
        assert back.returncode == 0, back.stdout + back.stderr
        assert _status().get("systemd_node") is None
        assert sdnode_run.left_behind(Paths()) == []


def _read(profile: NodeProfile, path: str) -> bytes:
    with NodeSession(profile) as node:
        return rf.read_file(node.ssh, path, sudo=True)


def _sh(profile: NodeProfile, script: str) -> str:
    with NodeSession(profile) as node:
        res = node.ssh.run(["sh", "-c", script], sudo=True, timeout=120)
        res.check(script)
        return res.stdout


def _main_pid(profile: NodeProfile) -> int:
    return int(_sh(profile, "systemctl show --property MainPID --value kubelet").strip())


def _wait_healthy(profile: NodeProfile, store: Store) -> None:
    deadline = time.monotonic() + 120
    while not preflight.show(profile, store=store)["healthy"]:
        assert time.monotonic() < deadline, "the systemd node's kubelet did not come back"
        time.sleep(1)


@pytest.fixture()
def sd(systemd_node: NodeProfile, store: Store) -> Iterator[NodeProfile]:
    before = {p: _read(systemd_node, p) for p in WATCHED}
    yield systemd_node
    if Journal(store).pending(systemd_node.node_name) is not None:
        with NodeController(systemd_node, store, break_lock=True) as ctl:
            ctl.restore()
    for path, text in before.items():
        assert _read(systemd_node, path) == text, f"{path} is not byte-identical"
    with NodeSession(systemd_node) as node:
        assert NodeLock(node.ssh, systemd_node.lock_path, sudo=True).read() is None
    assert _sh(systemd_node, "systemctl is-active kubelet").strip() == "active"
    _wait_healthy(systemd_node, store)


def _running(profile: NodeProfile) -> tuple[dict[str, Any], dict[str, bool]]:
    cluster = connect(profile.kubeconfig)
    return configz(cluster, profile.node_name), feature_enabled(cluster, profile.node_name)


# --- the node ------------------------------------------------------------------------------


def test_status_shows_the_node_its_units_and_init_pid(systemd_node: NodeProfile) -> None:
    st = _status()
    node = st["systemd_node"]
    assert st["up"] is True and st["ready"] is True
    assert node["name"] == sdnode.NAME and node["ready"] is True and node["healthy"] is True
    assert node["units"] == {"containerd": "active", "kubelet": "active", "ssh": "active"}
    init = node["init_pid"]
    status = Path(f"/proc/{init}/status").read_text()
    nspid = next(ln for ln in status.splitlines() if ln.startswith("NSpid:")).split()[1:]
    assert nspid == [str(init), "1"]  # PID 1 of its own pid namespace
    assert node["profile"] == str(sdnode.SystemdNode(Paths()).profile)


def test_the_profile_differs_from_the_shipped_one_only_in_how_the_node_is_reached(
    systemd_node: NodeProfile,
) -> None:
    shipped = load_profile("kubeadm-systemd")
    ours = systemd_node
    assert ours.ssh is not None
    assert ours.ssh.host == sdnode.NODE_IP and ours.ssh.port == 22
    assert ours.ssh.user == "abtest" and not ours.ssh.use_agent and ours.ssh.key_file
    same = [
        "sudo",
        "kubelet_config_path",
        "kubelet_binary_path",
        "restart_command",
        "healthz_url",
        "log_command",
        "status_command",
        "pid_command",
        "sandbox_count_command",
        "image_present_command",
        "stopped_sandboxes_command",
        "sandbox_remove_command",
        "round_sandboxes_command",
        "sandbox_stop_command",
        "runtime_handlers_command",
        "sandbox_handlers_command",
        "lock_path",
        "health_timeout_s",
    ]
    for name in same:
        assert getattr(ours, name) == getattr(shipped, name), name


def test_the_kubelet_runs_as_kubeadm_runs_it(sd: NodeProfile) -> None:
    cmdline = _sh(sd, 'tr "\\0" " " < /proc/$(systemctl show -p MainPID --value kubelet)/cmdline')
    for arg in (
        "/usr/bin/kubelet",
        "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
        f"--kubeconfig={sf.KUBELET_KUBECONFIG}",
        f"--config={sf.KUBELET_CONFIG}",
        f"--node-ip={sdnode.NODE_IP}",
        f"--config-dir={sf.CONFIG_DIR}",
    ):
        assert arg in cmdline.split(), (arg, cmdline)
    assert _read(sd, sf.KUBEADM_DROPIN).decode() == sf.TEN_KUBEADM
    assert _sh(sd, "ps -o comm= -p 1").strip() == "systemd"
    assert _sh(sd, "systemctl is-enabled kubelet containerd ssh").split() == ["enabled"] * 3
    with NodeSession(sd) as node:
        assert node.image_present("docker.io/library/busybox:1.36.1")
        assert node.sandbox_count() >= 0
        assert "kubelet" in node.kubelet_log_tail(5)  # journalctl -u kubelet


def test_check_show_apply_restore_through_systemctl(sd: NodeProfile, store: Store) -> None:
    report = preflight.check(sd, {GATE: False, FIELD: 25}, store=store)
    assert report.ok, [(i.name, i.detail) for i in report.items if not i.ok]
    shown = preflight.show(sd, store=store)
    assert shown["healthy"]
    original = _read(sd, sf.KUBELET_CONFIG)
    pid_before = _main_pid(sd)
    with applied(sd, {GATE: False, FIELD: 25}, store=store) as rec:
        config, gates = _running(sd)
        assert config["featureGates"]["ContainerCheckpoint"] is False
        assert config["kubeAPIQPS"] == 25 and gates["ContainerCheckpoint"] is False
        assert rec.verified[GATE] == {"expected": False, "configz": False, "metric": False}
        assert rec.restarted and rec.journal_id is not None
        # restarted by systemd (`systemctl restart kubelet`): a new main pid of the unit
        pid_during = _main_pid(sd)
        assert pid_during not in (0, pid_before)
        assert _sh(sd, "systemctl is-active kubelet").strip() == "active"
        assert _read(sd, sf.KUBELET_CONFIG) != original
    assert rec.restore is not None and rec.restore.restored
    assert _read(sd, sf.KUBELET_CONFIG) == original
    config, gates = _running(sd)
    assert gates["ContainerCheckpoint"] is True and config["kubeAPIQPS"] == 50
    assert _main_pid(sd) not in (0, pid_during)


def _restart_and_wait(profile: NodeProfile, store: Store) -> None:
    _sh(profile, "systemctl restart kubelet")
    _wait_healthy(profile, store)


def test_a_gate_in_kubeadm_flags_env_is_refused_naming_the_flag(
    sd: NodeProfile, store: Store
) -> None:
    original = _read(sd, sf.KUBEADM_FLAGS).decode()
    flagged = original.rstrip().rstrip('"') + ' --feature-gates=ContainerCheckpoint=false"\n'
    config = _read(sd, sf.KUBELET_CONFIG)
    try:
        _sh(sd, f"printf %s {shlex.quote(flagged)} > {sf.KUBEADM_FLAGS}")
        _restart_and_wait(sd, store)
        with NodeController(sd, store) as ctl, pytest.raises(UserError) as err:
            ctl.apply({GATE: True})
        assert f"{GATE} is set on the kubelet's command line by `--feature-gates=" in str(err.value)
        assert _read(sd, sf.KUBELET_CONFIG) == config
        assert Journal(store).pending(sd.node_name) is None
    finally:
        _sh(sd, f"printf %s {shlex.quote(original)} > {sf.KUBEADM_FLAGS}")
        _restart_and_wait(sd, store)


def test_a_field_in_a_config_dir_dropin_is_refused_naming_the_file(
    sd: NodeProfile, store: Store
) -> None:
    dropin = f"{sf.CONFIG_DIR}/60-test.conf"
    text = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nkubeAPIQPS: 7\n"
    config = _read(sd, sf.KUBELET_CONFIG)
    try:
        _sh(sd, f"printf %s {shlex.quote(text)} > {dropin}")
        _restart_and_wait(sd, store)
        report = preflight.check(sd, {FIELD: 9}, store=store)
        sources = {i.name: i for i in report.items}["kubelet sources"]
        assert not sources.ok
        assert f"{FIELD} is set by the drop-in {dropin}" in sources.detail
        with NodeController(sd, store) as ctl, pytest.raises(UserError, match=r"60-test\.conf"):
            ctl.apply({FIELD: 9})
        assert _read(sd, sf.KUBELET_CONFIG) == config
    finally:
        _sh(sd, f"rm -f {dropin}")
        _restart_and_wait(sd, store)


def test_a_kubelet_that_will_not_start_is_rolled_back_and_the_unit_is_active_again(
    sd: NodeProfile, store: Store
) -> None:
    """systemd restarts the failing kubelet every RestartSec (10 s, kubeadm's unit): the
    health wait must not take a unit in its restart loop for a healthy kubelet."""
    with NodeController(sd, store) as ctl, pytest.raises(RolledBack) as caught:
        ctl.apply({"featureGates.NoSuchGateAtAll": True}, check_known=False)
    failed = caught.value
    assert failed.stage == "healthz"
    assert "unrecognized feature gate" in failed.log_tail  # from journalctl -u kubelet
    assert failed.rollback.restored and failed.rollback.health is not None
    assert _sh(sd, "systemctl is-active kubelet").strip() == "active"
    [entry] = Journal(store).history(sd.node_name)
    assert entry.state == RESTORED and "rolled back" in (entry.detail or "")


def test_sigkill_mid_apply_then_node_restore(sd: NodeProfile, store: Store) -> None:
    profile = str(sdnode.SystemdNode(Paths()).profile)
    original = _read(sd, sf.KUBELET_CONFIG)
    env = {"ABTEST_DB": str(store.path), "ABTEST_NODE_TEST_HOOK": "kill-after-write"}
    kill = subprocess.run(
        [sys.executable, "-m", "abtest", "node", "apply", "--profile", profile,
         "--set", f"{FIELD}=17"],
        capture_output=True, text=True, timeout=180, env={**_env(), **env},
    )  # fmt: skip
    assert kill.returncode == -signal.SIGKILL, kill.stderr
    assert _read(sd, sf.KUBELET_CONFIG) != original
    restore = subprocess.run(
        [sys.executable, "-m", "abtest", "node", "restore", "--profile", profile, "--json"],
        capture_output=True, text=True, timeout=240, env={**_env(), "ABTEST_DB": str(store.path)},
    )  # fmt: skip
    assert restore.returncode == 0, restore.stderr
    assert '"restored": true' in restore.stdout
    assert _read(sd, sf.KUBELET_CONFIG) == original
    config, _ = _running(sd)
    assert config["kubeAPIQPS"] == 50


def _env() -> dict[str, str]:
    return dict(os.environ)


# --- a fleet of two shapes: the process node and the systemd node ---------------------------

REPO = Path(__file__).resolve().parents[3]


def test_sigterm_mid_sweep_over_both_shapes_restores_both(
    systemd_node: NodeProfile, store: Store, tmp_path: Path
) -> None:
    lab = load_profile("lab")
    profiles = (lab, systemd_node)
    originals = {p.node_name: _read(p, p.kubelet_config_path) for p in profiles}
    playbook = quick_copy(tmp_path)
    db = tmp_path / "term.sqlite"
    run_id_file = tmp_path / "run-id"
    log = tmp_path / "sweep.log"
    args = [
        "gates", "kubeAPIQPS", "--playbook", playbook, "--profile", "lab",
        "--profile", str(sdnode.SystemdNode(Paths()).profile), "--rounds", "2", "--sizes", "5",
        "--namespace", "abtest-fleet", "--db", str(db), "--run-id-file", str(run_id_file),
    ]  # fmt: skip
    rc, out_text = sigterm_once_every_node_measured(args, db, run_id_file, log, deadline_s=400)
    assert rc == 128 + signal.SIGTERM, out_text[-3000:]
    assert "Traceback" not in out_text
    with Store(db) as s:
        for p in profiles:
            assert _read(p, p.kubelet_config_path) == originals[p.node_name], p.node_name
            state = preflight.show(p, store=s)
            assert state["healthy"] is True, (p.node_name, state["problems"])
            assert state["pending_change"] is None and state["lock"] is None, state
        (run,) = s.query("SELECT status, stop_reason FROM runs")
        node_names = {r["node_name"] for r in s.query("SELECT DISTINCT node_name FROM rounds")}
    assert run["status"] == "interrupted" and "SIGTERM" in run["stop_reason"]
    assert node_names == {lab.node_name, sdnode.NAME}


def test_an_init_that_outlives_nspawn_is_still_tracked_and_stopped_by_its_pid(
    systemd_node: NodeProfile,
) -> None:
    """The container's init can outlive nspawn (then this machine's PID 1 adopts it): the
    lab still finds it by its recorded pid, and the module's teardown (`lab up` without
    --systemd-node) stops it by that pid and checks nothing is left. Last in the module."""
    node = sdnode.SystemdNode(Paths())
    init, parent = sdnode_run.init_pid(node), sdnode_run.nspawn_pid(node)
    assert init is not None and parent is not None
    os.kill(parent, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while sdnode_run.nspawn_pid(node) is not None:
        assert time.monotonic() < deadline, "nspawn did not die"
        time.sleep(0.1)
    assert sdnode_run.init_pid(node) == init
    node_json = _status()["systemd_node"]
    assert node_json["init_pid"] == init and node_json["nspawn_pid"] is None
    assert node_json["units"]["kubelet"] == "active"


# --- the patched kubelet on the systemd driver -------------------------------------------

SYSTEMD_GATES = ("KubeletSystemdCgroupCreateWithResources", "KubeletCgroupControllerReuse")
WITH_RESOURCES = "kubelet_cgroup_manager_systemd_units_created_with_resources_total"
MANAGERS_BUILT = "kubelet_cgroup_manager_libcontainer_managers_built_total"


def _metric(s: Store, run_id: str, arm: str, metric: str, labels: str = "") -> float:
    rows = s.query(
        "SELECT m.delta_count, m.labels FROM metric_deltas m JOIN rounds r ON r.id = m.round_id "
        "WHERE r.run_id = ? AND r.arm = ? AND m.metric = ?",
        (run_id, arm, metric),
    )
    return sum(float(r["delta_count"] or 0) for r in rows if labels in str(r["labels"]))


def test_the_two_systemd_gates_of_the_agc_build_engage_on_the_systemd_driver(
    sd: NodeProfile, tmp_path: Path
) -> None:
    """The agc build placed in the systemd node (builds_dir /var/lib/abtest-kubelets), its two
    cgroup gates swept alone and together on kubeadm's systemd-driver kubelet: the pod units
    are created carrying their resources only where the first gate is on, and the second gate
    builds fewer libcontainer managers (the QoS and pod cgroups keep the manager their create
    built)."""
    placed = _abtest("lab", "kubelets", "v1.36.3+agc", timeout=3600)
    assert placed.returncode == 0, placed.stdout[-2000:] + placed.stderr[-2000:]
    assert f"in {sdnode.NAME} at {sdnode.BUILDS_DIR}/v1.36.3+agc/kubelet" in placed.stdout
    db = tmp_path / "sd.sqlite"
    proc = _abtest(
        "gates", *SYSTEMD_GATES, "--all", "--catalog", "agc", "--kubelet-build", "v1.36.3+agc",
        "--profile", str(sdnode.SystemdNode(Paths()).profile), "--rounds", "1", "--sizes", "10",
        "--playbook", quick_copy(tmp_path), "--db", str(db), "--json", timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run_id = json.loads(proc.stdout)["run_id"]
    with Store(db) as s:
        for arm in ("baseline", f"+{SYSTEMD_GATES[1]}"):
            assert _metric(s, run_id, arm, WITH_RESOURCES) == 0, arm
        for arm in (f"+{SYSTEMD_GATES[0]}", "combined"):
            assert _metric(s, run_id, arm, WITH_RESOURCES) >= 10, arm
        reused = _metric(s, run_id, f"+{SYSTEMD_GATES[1]}", MANAGERS_BUILT, "update")
        rebuilt = _metric(s, run_id, "baseline", MANAGERS_BUILT, "update")
        assert rebuilt >= 10 and reused < rebuilt / 2, (reused, rebuilt)
