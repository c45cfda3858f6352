"""Node config and binary safety (issue 11 items 3, 4, 6) on the scripted fake node.

The node is :class:`abtest.testing.FakeHost` (abtest/testing/host.py): the controller's real remote
scripts (atomic write, copy, lock, markers) run with ``subprocess`` on files in ``tmp_path``;
only the kubelet and the API server are scripted, and a restart runs the kubelet "binary" (a
shell script) on the config as written. ``host.fail_when`` scripts a failing command (a full
disk) to test the order of writes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from abtest.config.playbook import NodeProfile
from abtest.errors import NodeError, UserError
from abtest.node import control
from abtest.node import remote_files as rf
from abtest.node.binary import KubeletBinary
from abtest.node.records import RolledBack
from abtest.node.remote_files import ChangedUnderUs
from abtest.store.db import Store
from abtest.store.journal import ABANDONED, CHANGED, RESTORED, Journal
from abtest.testing import FakeConnection, FakeHost

CONFIG = b"""\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
kubeAPIQPS: 50
"""
GOOD_KUBELET = b"#!/bin/sh\n# the original kubelet\nexit 0\n"
BAD_KUBELET = b"#!/bin/sh\necho 'unrecognized flag: this build will not start' >&2\nexit 1\n"
NO_SPACE = "No space left on device"


@pytest.fixture()
def host(tmp_path: Path) -> FakeHost:
    """The node: kubelet config, binary and lock in ``tmp_path/node``."""
    return FakeHost(tmp_path / "node", config=CONFIG)


@pytest.fixture()
def node(host: FakeHost) -> NodeProfile:
    """The profile pointed at the fake host."""
    return host.profile()


def _files(profile: NodeProfile) -> set[str]:
    root = Path(profile.kubelet_config_path).parent
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _left_as_found(profile: NodeProfile) -> None:
    """Only the files the node had at the start: no backup, marker, temp file or lock."""
    assert _files(profile) == {"config.yaml", "bin", "bin/kubelet"}


# --------------------------------------------------------------------------- item 6


@pytest.mark.parametrize("failing", [control.BACKUP_SUFFIX, control.BACKUP_SUFFIX + ".marker"])
def test_a_backup_write_that_fails_leaves_no_pending_entry_and_no_lock(
    host: FakeHost, node: NodeProfile, store: Store, failing: str
) -> None:
    target = node.kubelet_config_path + failing

    def disk_full(argv: list[str]) -> bool:
        return "abtest-write" in argv and argv[argv.index("abtest-write") + 3] == target

    host.fail_when(disk_full, NO_SPACE)
    with host.controller(store) as ctl, pytest.raises(NodeError, match="No space left"):
        ctl.apply({"kubeAPIQPS": 25})
    assert Journal(store).pending(node.node_name) is None
    [entry] = Journal(store).history(node.node_name)
    assert entry.state == ABANDONED and "No space left" in (entry.detail or "")
    assert Path(node.kubelet_config_path).read_bytes() == CONFIG
    _left_as_found(node)


def test_a_binary_backup_that_fails_leaves_nothing_behind(
    host: FakeHost, node: NodeProfile, store: Store
) -> None:
    candidate = Path(node.kubelet_binary_path).with_name("kubelet-rc1")
    candidate.write_bytes(BAD_KUBELET)

    def disk_full(argv: list[str]) -> bool:
        return "abtest-write" in argv and node.kubelet_binary_path + ".abtest-original" in argv

    host.fail_when(disk_full, NO_SPACE)
    with host.controller(store) as ctl, pytest.raises(NodeError, match="No space left"):
        ctl.install_kubelet_binary(str(candidate))
    candidate.unlink()
    assert Journal(store).pending(node.node_name, kind="binary") is None
    assert Path(node.kubelet_binary_path).read_bytes() == GOOD_KUBELET
    _left_as_found(node)


# --------------------------------------------------------------------------- item 3


def test_the_write_checks_the_target_just_before_the_rename(
    host: FakeHost, node: NodeProfile
) -> None:
    conn = FakeConnection(host)
    path = node.kubelet_config_path
    with pytest.raises(ChangedUnderUs) as caught:
        rf.atomic_write(conn, path, b"new\n", sudo=False, expect_sha256=rf.sha256(b"other"))
    assert caught.value.found == rf.sha256(CONFIG)
    assert Path(path).read_bytes() == CONFIG
    _left_as_found(node)
    rf.atomic_write(conn, path, b"new\n", sudo=False, expect_sha256=rf.sha256(CONFIG))
    assert Path(path).read_bytes() == b"new\n"


def test_an_edit_between_arms_is_refused_and_left_as_found(
    host: FakeHost, node: NodeProfile, store: Store
) -> None:
    config = Path(node.kubelet_config_path)
    edited = CONFIG + b"maxPods: 7  # an operator's edit\n"
    with host.controller(store) as ctl:
        ctl.apply({"kubeAPIQPS": 25})
        config.write_bytes(edited)
        with pytest.raises(ChangedUnderUs, match="changed under us"):
            ctl.apply({"kubeAPIQPS": 30}, force_restart=True)
        assert config.read_bytes() == edited
        pending = Journal(store).pending(node.node_name)
        assert pending is not None and pending.state == CHANGED
        assert "changed under us" in (pending.detail or "")
        with pytest.raises(ChangedUnderUs, match="--force"):
            ctl.restore()
        assert config.read_bytes() == edited
        assert Journal(store).pending(node.node_name).state == CHANGED  # type: ignore[union-attr]
        back = ctl.restore(force=True)
        assert back.restored
    assert config.read_bytes() == CONFIG
    assert Journal(store).pending(node.node_name) is None
    _left_as_found(node)


def test_restore_without_the_journal_checks_the_node_marker(
    host: FakeHost, node: NodeProfile, store: Store, tmp_path: Path
) -> None:
    config = Path(node.kubelet_config_path)
    ctl = host.controller(store)
    with ctl:
        ctl.apply({"kubeAPIQPS": 25})
    applied_bytes = config.read_bytes()
    assert applied_bytes != CONFIG
    assert Path(node.lock_path).exists()  # kept for the change in effect
    marker = Path(node.kubelet_config_path + control.BACKUP_SUFFIX + control.MARKER_SUFFIX)
    assert rf.sha256(applied_bytes) in marker.read_text()

    # the database is lost, and someone edits the config: a fresh restore refuses
    config.write_bytes(b"# newer config by someone else\n" + applied_bytes)
    edited = config.read_bytes()
    with Store(tmp_path / "fresh.sqlite") as fresh:
        with host.controller(fresh) as again, pytest.raises(ChangedUnderUs):
            again.restore()
        assert config.read_bytes() == edited
        [entry] = Journal(fresh).history(node.node_name)
        assert entry.state == CHANGED
        # the editor puts our bytes back: now the restore goes through, lock taken over by
        # the token in the marker (no --break-lock)
        config.write_bytes(applied_bytes)
        with host.controller(fresh) as again:
            assert again.restore().restored
    assert config.read_bytes() == CONFIG
    _left_as_found(node)


def test_an_old_backup_without_a_marker_is_not_restored_over_a_newer_config(
    host: FakeHost, node: NodeProfile, store: Store, tmp_path: Path
) -> None:
    config = Path(node.kubelet_config_path)
    backup = Path(node.kubelet_config_path + control.BACKUP_SUFFIX)
    # a very old original: a config the kubelet runs (a restore restarts and verifies it)
    old = b"# a very old original\n" + CONFIG.replace(b"kubeAPIQPS: 50", b"kubeAPIQPS: 40")
    backup.write_bytes(old)
    # an apply (with a database that knows nothing) does not overwrite that backup
    with Store(tmp_path / "other.sqlite") as other:
        with host.controller(other) as ctl, pytest.raises(UserError, match="node restore"):
            ctl.apply({"kubeAPIQPS": 25})
        assert Journal(other).history(node.node_name) == []
    assert not Path(node.lock_path).exists()
    with host.controller(store) as ctl, pytest.raises(ChangedUnderUs, match="--force"):
        ctl.restore()
    assert config.read_bytes() == CONFIG and backup.exists()
    with host.controller(store) as ctl:
        assert ctl.restore(force=True).restored
    assert config.read_bytes() == old
    config.write_bytes(CONFIG)
    _left_as_found(node)


# --------------------------------------------------------------------------- item 4


def test_binary_swap_keeps_owner_and_mode_and_restores_without_the_journal(
    host: FakeHost, node: NodeProfile, store: Store, tmp_path: Path
) -> None:
    binary = Path(node.kubelet_binary_path)
    if os.geteuid() == 0:
        os.chown(binary, 1234, 2345)
    before = os.stat(binary)
    candidate = tmp_path / "kubelet-rc1"
    candidate.write_bytes(GOOD_KUBELET + b"# rc1\n")
    candidate.chmod(0o644)
    with host.controller(store) as ctl:
        sha = ctl.install_kubelet_binary(str(candidate))
    assert sha == rf.sha256(candidate.read_bytes()) == rf.sha256(binary.read_bytes())
    now = os.stat(binary)
    assert (now.st_mode, now.st_uid, now.st_gid) == (before.st_mode, before.st_uid, before.st_gid)
    marker = Path(node.kubelet_binary_path + ".abtest-original" + control.MARKER_SUFFIX)
    assert rf.sha256(GOOD_KUBELET) in marker.read_text()
    assert Path(node.lock_path).exists(), "a binary change in effect keeps the lock"

    with Store(tmp_path / "fresh.sqlite") as fresh:  # the controller's database is lost
        with host.controller(fresh) as ctl:
            rec = ctl.restore()
        assert rec.restored and "binary" in rec.message
    assert binary.read_bytes() == GOOD_KUBELET
    after = os.stat(binary)
    assert (after.st_mode, after.st_uid, after.st_gid) == (
        before.st_mode,
        before.st_uid,
        before.st_gid,
    )
    _left_as_found(node)


def test_a_failed_copy_leaves_no_temp_file(host: FakeHost, node: NodeProfile) -> None:
    conn = FakeConnection(host)
    with pytest.raises(NodeError):
        rf.atomic_copy(  # chown fails after the copy into the temp file
            conn,
            "/bin/sh",
            node.kubelet_binary_path,
            owner="no-such-user-abtest:no-such-group",
            mode=0o755,
            sudo=False,
        )
    assert Path(node.kubelet_binary_path).read_bytes() == GOOD_KUBELET
    _left_as_found(node)


def test_a_candidate_that_will_not_start_rolls_back_the_binary_too(
    host: FakeHost, node: NodeProfile, store: Store, tmp_path: Path
) -> None:
    candidate = tmp_path / "kubelet-broken"
    candidate.write_bytes(BAD_KUBELET)
    with host.controller(store) as ctl:
        ctl.install_kubelet_binary(str(candidate))
        with pytest.raises(RolledBack) as caught:
            ctl.apply({}, force_restart=True)
        assert caught.value.stage == "healthz"
        assert "kubelet binary" in str(caught.value)
        assert not ctl.has_pending_change()
    journal = Journal(store)
    assert journal.pending(node.node_name) is None
    assert journal.pending(node.node_name, kind="binary") is None
    [binary_entry] = [e for e in journal.history(node.node_name) if e.kind == "binary"]
    assert binary_entry.state == RESTORED
    assert Path(node.kubelet_binary_path).read_bytes() == GOOD_KUBELET
    assert Path(node.kubelet_config_path).read_bytes() == CONFIG
    _left_as_found(node)


def test_kubelet_binary_marker_round_trip() -> None:
    marker = rf.Marker(
        ours=("a" * 64, "b" * 64),
        original_sha256="a" * 64,
        lock_token="0123456789abcdef",
        owner="0:0",
        mode="755",
    )
    assert rf.Marker.parse(marker.render()) == marker
    assert rf.Marker.parse("garbage\n") is None
    assert KubeletBinary is not None


def test_regress_says_why_an_arm_could_not_be_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate binary the kubelet will not start: the sweep records "arm failed" (the
    node rolled back, the run finished), and the gate is "could not measure", saying why."""
    from abtest.engine import regress_live as regress_live
    from abtest.engine.node_sweep import NodeOutcome
    from abtest.engine.sweep import SweepResult

    why = (
        "healthz: the kubelet is not running; rolled back to the original config and kubelet "
        "binary (healthy 1.2 s later)\n--- kubelet log, last lines ---\nunknown flag"
    )
    outcome = NodeOutcome("abtest-lab", "finished", failed_arms={"candidate": why})
    monkeypatch.setattr(regress_live, "build_regress_plan", lambda opts, blocks: None)
    monkeypatch.setattr(
        regress_live, "run_sweep", lambda *a, **k: SweepResult("run-1", "finished", [outcome], 1.0)
    )
    opts = regress_live.LiveRegressOptions(
        profile="lab",
        playbook=None,  # type: ignore[arg-type]
        reference="default",
        candidate="binary=/opt/kubelet-rc1",
        sizes=(5,),
        metrics=("batch_ready_s",),
        margin_pct=5.0,
        confidence=0.95,
        rounds=2,
        max_rounds=4,
        seed=1,
    )
    with pytest.raises(regress_live.CouldNotMeasure) as caught:
        regress_live.run_live(opts, None, lambda _line: None)  # type: ignore[arg-type]
    message = str(caught.value)
    assert caught.value.exit_code == 4
    assert "candidate" in message and "the kubelet is not running" in message
    assert "abtest-lab" in message and "kubelet log" not in message  # one line per arm
