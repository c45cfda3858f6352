"""Node control against the real lab over real SSH. Every test leaves the kubelet config
byte-identical, the lock free and the node healthy (checked by the ``lab_node`` fixture).

Run them under the lab lock:
``flock /tmp/abtest-lab.lock pytest -m lab tests/lab/node/test_node_*.py``.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from abtest.cluster.client import connect
from abtest.cluster.nodes import configz, feature_enabled
from abtest.errors import HostKeyError, NodeLockedError, UserError
from abtest.node.applied import applied
from abtest.node.control import NodeController
from abtest.node.records import RolledBack
from abtest.node.session import NodeSession
from abtest.node.ssh import Connection as SSHConnection
from abtest.store.journal import RESTORED, Journal

if TYPE_CHECKING:
    from node_fixtures import LabNode

pytestmark = pytest.mark.lab
pytest_plugins = ["node_fixtures"]  # the lab_node fixture

GATE = "featureGates.ContainerCheckpoint"  # default true in the lab
GATE2 = "featureGates.PLEGOnDemandRelist"  # default true in the lab (v1.36, not in its config)
FIELD = "kubeAPIQPS"  # 50 in the lab


def _running(lab: LabNode) -> tuple[dict[str, object], dict[str, bool]]:
    cluster = connect(lab.profile.kubeconfig)
    return configz(cluster, lab.profile.node_name), feature_enabled(cluster, lab.profile.node_name)


def test_ssh_quotes_arguments_on_the_real_node(lab_node: LabNode) -> None:
    with NodeSession(lab_node.profile) as node:
        res = node.ssh.run(["printf", "%s|", "$(id -u)", "a b", "'q'", "; echo no"])
        assert res.stdout == "$(id -u)|a b|'q'|; echo no|"
        assert node.ssh.run(["id", "-u"], sudo=True).stdout.strip() == "0"
        assert node.image_present("docker.io/library/busybox:1.36.1")
        assert not node.image_present("docker.io/library/busybox:0.0.0-not-there")
        assert node.sandbox_count() >= 0
        assert node.kubelet_log_tail(3).count("\n") <= 2


def test_toggle_gate_and_field_both_ways(lab_node: LabNode) -> None:
    settings = {GATE: False, FIELD: 25}
    with applied(lab_node.profile, settings, store=lab_node.store) as rec:
        config, gates = _running(lab_node)
        assert config["featureGates"]["ContainerCheckpoint"] is False  # type: ignore[index]
        assert config["kubeAPIQPS"] == 25
        assert gates["ContainerCheckpoint"] is False
        assert rec.verified[GATE] == {"expected": False, "configz": False, "metric": False}
        assert rec.verified[FIELD]["configz"] == 25
        assert rec.before == {GATE: True, FIELD: 50}
        assert rec.changed and rec.restarted and rec.journal_id is not None
        for secs in (rec.restart_to_healthz_s, rec.restart_to_ready_s, rec.restart_to_verified_s):
            assert secs is not None and 0 < secs < 60
        assert rec.restart_to_healthz_s <= rec.restart_to_ready_s <= rec.restart_to_verified_s  # type: ignore[operator]
        assert "-kubeAPIQPS: 50" in rec.diff and "+kubeAPIQPS: 25" in rec.diff
        assert lab_node.config_bytes() != lab_node.original
        assert lab_node.lock_present() and lab_node.backup_present()
    assert rec.restore is not None and rec.restore.restored
    assert rec.restore.health is not None
    assert rec.restore.health.verified[GATE]["metric"] is True
    assert rec.restore.health.verified[FIELD]["configz"] == 50
    config, gates = _running(lab_node)
    assert gates["ContainerCheckpoint"] is True and config["kubeAPIQPS"] == 50
    assert lab_node.config_bytes() == lab_node.original
    entry = Journal(lab_node.store).get(rec.journal_id)
    assert entry.state == RESTORED and entry.original == lab_node.original


def test_switching_settings_then_restore(lab_node: LabNode) -> None:
    """The sweep's path: one controller, arm after arm, each relative to the original."""
    with NodeController(lab_node.profile, lab_node.store) as ctl:
        first = ctl.apply({GATE: False})
        second = ctl.apply({GATE2: False})
        assert first.journal_id == second.journal_id
        # the first arm's gate is verified back at its original value
        assert second.verified[GATE] == {"expected": True, "configz": True, "metric": True}
        assert second.verified[GATE2]["metric"] is False
        _, gates = _running(lab_node)
        assert gates["ContainerCheckpoint"] is True
        assert gates["PLEGOnDemandRelist"] is False
        same = ctl.apply({GATE2: False})
        assert not same.restarted and "already in effect" in same.messages[0]
        forced = ctl.apply({GATE2: False}, force_restart=True)
        assert forced.restarted and forced.restart_to_verified_s is not None
        baseline = ctl.apply({})  # the original config, as an arm
        assert baseline.restarted and lab_node.config_bytes() == lab_node.original
        assert set(baseline.verified) == {GATE, GATE2}
        back = ctl.restore()
        assert back.restored and back.health is not None
        assert set(back.health.verified) == {GATE, GATE2}
    _, gates = _running(lab_node)
    assert gates["ContainerCheckpoint"] and gates["PLEGOnDemandRelist"]


def test_unknown_gate_is_refused_before_any_change(lab_node: LabNode) -> None:
    with NodeController(lab_node.profile, lab_node.store) as ctl, pytest.raises(UserError):
        ctl.apply({"featureGates.NoSuchGateAtAll": True})
    assert Journal(lab_node.store).history(lab_node.profile.node_name) == []


def test_unknown_gate_kubelet_refuses_then_rollback(lab_node: LabNode) -> None:
    started = time.monotonic()
    with (
        NodeController(lab_node.profile, lab_node.store) as ctl,
        pytest.raises(RolledBack) as caught,
    ):
        ctl.apply({"featureGates.NoSuchGateAtAll": True}, check_known=False)
    failed = caught.value
    assert failed.stage == "healthz"
    assert "unrecognized feature gate" in failed.log_tail
    assert "unrecognized feature gate" in str(failed)
    assert failed.rollback.restored and failed.rollback.health is not None
    assert time.monotonic() - started < 60, "a kubelet that cannot start must fail fast"
    assert lab_node.config_bytes() == lab_node.original
    assert lab_node.healthy()
    [entry] = Journal(lab_node.store).history(lab_node.profile.node_name)
    assert entry.state == RESTORED and "rolled back" in (entry.detail or "")


def test_sigkill_after_write_then_node_restore(lab_node: LabNode) -> None:
    proc = lab_node.cli(
        "apply", "--profile", "lab", "--set", f"{FIELD}=17",
        env={"ABTEST_NODE_TEST_HOOK": "kill-after-write"},
    )  # fmt: skip
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert lab_node.config_bytes() != lab_node.original  # the new config was written
    assert lab_node.lock_present()
    pending = Journal(lab_node.store).pending(lab_node.profile.node_name)
    assert pending is not None and pending.original == lab_node.original

    # another apply is refused while the dead controller's change is pending
    again = lab_node.cli("apply", "--profile", "lab", "--set", f"{FIELD}=18")
    _, err = again.communicate(timeout=120)
    assert again.returncode == 4 and "NodeLockedError" in err

    restore = lab_node.cli("restore", "--profile", "lab", "--json")
    out, err = restore.communicate(timeout=180)
    assert restore.returncode == 0, err
    assert '"restored": true' in out
    assert lab_node.config_bytes() == lab_node.original
    assert not lab_node.lock_present()
    assert lab_node.healthy()
    config, _ = _running(lab_node)
    assert config["kubeAPIQPS"] == 50


def test_sigterm_during_apply_restores(lab_node: LabNode) -> None:
    proc = lab_node.cli("apply", "--profile", "lab", "--set", f"{GATE}=false")
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "restarting the kubelet" in line:
            proc.send_signal(signal.SIGTERM)
            break
    _, tail = proc.communicate(timeout=180)
    err = "".join(lines) + tail
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "rolling back" in err and "SIGTERM" in err
    assert lab_node.config_bytes() == lab_node.original
    assert not lab_node.lock_present()
    [entry] = Journal(lab_node.store).history(lab_node.profile.node_name)
    assert entry.state == RESTORED and "SIGTERM" in (entry.detail or "")
    _, gates = _running(lab_node)
    assert gates["ContainerCheckpoint"] is True


def test_wrong_host_key_is_refused_and_nothing_changes(lab_node: LabNode, tmp_path: Path) -> None:
    prof = lab_node.profile
    with NodeSession(prof) as node:
        assert isinstance(node.ssh, SSHConnection)  # the real one: its endpoint knows the key
        name = node.ssh.endpoint.host_key_name
        real_line = Path(node.ssh.endpoint.known_hosts).read_text()
    wrong = tmp_path / "known_hosts_wrong"
    # the same key type as the server's, a different key: a CHANGED host key
    other = _ed25519_line(name)
    wrong.write_text(other)
    assert prof.ssh is not None
    bad = replace(prof, ssh=replace(prof.ssh, known_hosts=str(wrong)))
    for accept in (False, True):  # a changed key is refused even with accept_new_host_key
        with (
            NodeController(bad, lab_node.store, accept_new_host_key=accept) as ctl,
            pytest.raises(HostKeyError, match="CHANGED"),
        ):
            ctl.apply({GATE: False})
    assert wrong.read_text() == other
    assert Journal(lab_node.store).history(prof.node_name) == []

    # an unknown host is refused, and accepted (and recorded) only when asked to
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    assert prof.ssh is not None
    unknown = replace(prof, ssh=replace(prof.ssh, known_hosts=str(empty)))
    with NodeSession(unknown) as node, pytest.raises(HostKeyError, match="not in"):
        node.sandbox_count()
    with NodeSession(unknown, accept_new_host_key=True) as node:
        assert node.sandbox_count() >= 0
    assert empty.read_text().split()[1:] == real_line.split()[1:]
    assert lab_node.config_bytes() == lab_node.original


def _ed25519_line(host_key_name: str) -> str:
    """A known_hosts line with a random (well-formed) ed25519 public key."""
    blob = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + os.urandom(32)
    return f"{host_key_name} ssh-ed25519 {base64.b64encode(blob).decode()}\n"


def test_second_apply_while_locked_is_refused(lab_node: LabNode) -> None:
    with applied(lab_node.profile, {FIELD: 33}, store=lab_node.store):
        with (
            NodeController(lab_node.profile, lab_node.store) as other,
            pytest.raises(NodeLockedError, match="running"),
        ):
            other.apply({FIELD: 34})
        # --break-lock does not break a lock whose holder is running
        with (
            NodeController(lab_node.profile, lab_node.store, break_lock=True) as other,
            pytest.raises(NodeLockedError, match="does not apply"),
        ):
            other.apply({FIELD: 34})
        config, _ = _running(lab_node)
        assert config["kubeAPIQPS"] == 33


def test_cli_apply_then_restore(lab_node: LabNode) -> None:
    """The commands a person runs: apply keeps the lock for the change in effect, a second
    apply is told to restore first, restore puts everything back. Both well under a minute."""
    started = time.monotonic()
    apply = lab_node.cli(
        "apply", "--profile", "lab", "--set", f"{GATE}=false", "--set", f"{FIELD}=5"
    )
    out, err = apply.communicate(timeout=120)
    apply_s = time.monotonic() - started
    assert apply.returncode == 0, err
    assert "restart→healthz" in out and "restart→verified" in out
    assert "+kubeAPIQPS: 5" in out
    assert apply_s < 30

    again = lab_node.cli("apply", "--profile", "lab", "--set", f"{FIELD}=6")
    _, err = again.communicate(timeout=120)
    assert again.returncode == 4
    assert "change in effect" in err and "abtest node restore" in err

    show = lab_node.cli("show", "--profile", "lab", "--json")
    out, err = show.communicate(timeout=60)
    assert show.returncode == 0, err
    state = json.loads(out)
    assert state["feature_gates"]["ContainerCheckpoint"] is False
    assert "ContainerCheckpoint" not in state["enabled_features"]
    assert state["healthy"] is True and state["lock_holder"]
    assert state["pending_change"]["settings"] == {GATE: False, FIELD: 5}
    assert state["config_sha256"] != lab_node.original_sha256

    started = time.monotonic()
    restore = lab_node.cli("restore", "--profile", "lab")
    out, err = restore.communicate(timeout=120)
    restore_s = time.monotonic() - started
    assert restore.returncode == 0, err
    assert "restored" in out and restore_s < 30
    assert lab_node.config_bytes() == lab_node.original

    noop = lab_node.cli("restore", "--profile", "lab")
    out, _ = noop.communicate(timeout=60)
    assert noop.returncode == 0 and "nothing to restore" in out
