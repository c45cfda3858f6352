"""NodeController's apply / verify / rollback / restore paths on the scripted fake node
(abtest/testing/host.py): the controller's real code, the real remote scripts on real files,
only the kubelet and the API server scripted. The lab tests (test_node_lab.py,
test_node_safety_lab.py) prove the same paths on a real kubelet."""

from __future__ import annotations

from pathlib import Path

import pytest

from abtest.errors import NodeError, UserError
from abtest.node.records import RolledBack
from abtest.store.db import Store
from abtest.store.journal import APPLIED, FAILED, RESTORED, Journal
from abtest.testing.host import BAD_KUBELET, DEFAULTS, FakeHost


@pytest.fixture()
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path / "node")


def _entry(store: Store, host: FakeHost) -> tuple[str, str | None]:
    """The newest journal entry's state and detail."""
    entry = Journal(store).history(host.profile().node_name, limit=1)[0]
    return entry.state, entry.detail


def test_apply_verifies_the_running_value_and_restore_puts_the_original_back(
    host: FakeHost, store: Store
) -> None:
    host.expect("cmdline", "restart", "healthz", "read-node", "configz", "restart", "configz")
    with host.controller(store) as ctl:
        rec = ctl.apply({"kubeAPIQPS": 5})
        assert host.running_config["kubeAPIQPS"] == 5  # what the restarted kubelet read
        assert rec.restarted and rec.changed
        assert rec.before == {"kubeAPIQPS": 50}
        assert rec.verified["kubeAPIQPS"] == {"expected": 5, "configz": 5}
        assert rec.restart_to_verified_s is not None
        assert _entry(store, host)[0] == APPLIED
        assert host.lock_path.exists()
        assert {"config.yaml.abtest-original", "config.yaml.abtest-original.marker"} <= (
            host.files()
        )
        back = ctl.restore()
    assert back.restored and back.restart_to_verified_s is not None
    assert _entry(store, host)[0] == RESTORED
    host.verify()


def test_a_setting_not_in_effect_is_rolled_back(tmp_path: Path, store: Store) -> None:
    """The kubelet restarts healthy but does not take the value: verification fails at the
    deadline, the original goes back and is verified, the error says what did not show."""
    host = FakeHost(tmp_path / "node", ignores=("kubeAPIQPS",))
    host.expect("restart", "configz", "restart", "configz")
    with host.controller(store) as ctl, pytest.raises(RolledBack) as err:
        ctl.apply({"kubeAPIQPS": 5})
    assert err.value.stage == "verified"
    assert "kubeAPIQPS" in str(err.value) and "rolled back to the original config" in str(err.value)
    assert err.value.rollback.restored
    state, detail = _entry(store, host)
    assert state == RESTORED and detail is not None and detail.startswith("rolled back")
    host.verify()


def test_a_config_the_kubelet_refuses_fails_health_and_is_rolled_back_with_its_log(
    host: FakeHost, store: Store
) -> None:
    """A kubelet that exits at start: the status command says so, before the deadline."""
    host.expect("restart", "status", "status", "log", "restart", "healthz")
    with (
        host.controller(store, profile=host.profile(timeout_s=30.0)) as ctl,
        pytest.raises(RolledBack) as err,
    ):
        ctl.apply({"featureGates.NoSuchGate": True}, check_known=False)
    assert err.value.stage == "healthz"
    assert "unrecognized feature gate: NoSuchGate" in err.value.log_tail
    assert "kubelet log, last lines" in str(err.value)
    assert _entry(store, host)[0] == RESTORED
    host.verify()


def test_a_candidate_binary_that_fails_health_is_rolled_back_with_the_config(
    host: FakeHost, store: Store, tmp_path: Path
) -> None:
    candidate = tmp_path / "kubelet-candidate"
    candidate.write_bytes(BAD_KUBELET)
    candidate.chmod(0o755)
    with host.controller(store) as ctl:
        ctl.install_kubelet_binary(str(candidate))
        assert host.binary_path.read_bytes() == BAD_KUBELET
        with pytest.raises(RolledBack) as err:
            ctl.apply({"kubeAPIQPS": 7}, force_restart=True)
    assert err.value.stage == "healthz"
    assert "original config and kubelet binary" in str(err.value)
    assert "this build will not start" in err.value.log_tail
    assert Journal(store).pending(host.profile().node_name, kind="binary") is None
    host.verify()  # the original binary back, and running


def test_a_failed_restart_command_is_rolled_back(host: FakeHost, store: Store) -> None:
    host.fail("restart")
    with host.controller(store) as ctl, pytest.raises(RolledBack, match="restart command"):
        ctl.apply({"kubeAPIQPS": 5})
    assert host.calls.count("restart") == 2  # the failed one, then the rollback's
    assert _entry(store, host)[0] == RESTORED
    host.verify()


def test_restore_after_a_failed_rollback(host: FakeHost, store: Store) -> None:
    """The apply's restart and the rollback's both fail: the journal says FAILED, the lock is
    kept with the undo command, and a later restore (another controller) recovers the node."""
    host.fail("restart", times=2)
    with host.controller(store) as ctl, pytest.raises(NodeError, match="rollback failed") as err:
        ctl.apply({"kubeAPIQPS": 5})
    assert "abtest node restore --profile fake" in str(err.value)
    assert _entry(store, host)[0] == FAILED
    assert host.lock_path.exists()  # kept: the change it protects is still there
    assert "kubeAPIQPS: 5" in host.config_path.read_text()
    with host.controller(store) as ctl:
        back = ctl.restore()
    assert back.restored
    assert _entry(store, host)[0] == RESTORED
    host.verify()


def test_restore_after_its_own_restart_failed(host: FakeHost, store: Store) -> None:
    with host.controller(store) as ctl:
        ctl.apply({"kubeAPIQPS": 5})
        host.fail("restart")
        with pytest.raises(NodeError, match="restart command failed"):
            ctl.restore()
        assert Journal(store).pending(host.profile().node_name) is not None  # still to undo
        ctl.restore()
    host.verify()


def test_a_second_arm_puts_the_first_arms_path_back_and_verifies_it(
    host: FakeHost, store: Store
) -> None:
    with host.controller(store) as ctl:
        ctl.apply({"kubeAPIQPS": 5})
        rec = ctl.apply({"kubeAPIBurst": 20})
        assert host.running_config["kubeAPIQPS"] == 50  # back at the original's value
        assert host.running_config["kubeAPIBurst"] == 20
        assert set(rec.verified) == {"kubeAPIQPS", "kubeAPIBurst"}
        assert rec.before == {"kubeAPIQPS": 50, "kubeAPIBurst": DEFAULTS["kubeAPIBurst"]}
        ctl.restore()
    host.verify()


def test_already_in_effect_needs_no_write_and_no_restart(host: FakeHost, store: Store) -> None:
    with host.controller(store) as ctl:
        rec = ctl.apply({"kubeAPIQPS": 50})
    assert rec.messages == ["already in effect: no write, no restart"]
    assert not rec.restarted and "restart" not in host.calls
    # what was checked is kept as the evidence (a sweep stores it with the visit)
    assert rec.verified == {"kubeAPIQPS": {"expected": 50, "configz": 50}}
    assert rec.restart_to_verified_s is None
    host.verify()


def test_a_flag_that_overrides_the_setting_is_refused_before_any_change(
    tmp_path: Path, store: Store
) -> None:
    host = FakeHost(tmp_path / "node", flags=("--kube-api-qps=5",))
    with host.controller(store) as ctl, pytest.raises(UserError, match="kube-api-qps"):
        ctl.apply({"kubeAPIQPS": 7})
    assert "restart" not in host.calls
    assert Journal(store).history(host.profile().node_name) == []
    host.verify()


def test_an_unknown_path_is_refused_before_any_change(host: FakeHost, store: Store) -> None:
    with host.controller(store) as ctl, pytest.raises(UserError, match="does not know"):
        ctl.apply({"featureGates.NoSuchGate": True})
    assert "restart" not in host.calls
    host.verify()


def test_the_fake_fails_a_script_that_did_not_run(host: FakeHost, store: Store) -> None:
    host.expect("restart")
    with pytest.raises(AssertionError, match="'restart' not run"):
        host.verify()
