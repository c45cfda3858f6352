"""The binary swap in every order of swap, restore through another database, and resume
(issue 44): the original kubelet is never overwritten without a verified backup, a build
byte-identical to it is no swap, and no restore reports success while the node runs a build
of ours. On the scripted fake node (abtest.testing.FakeHost): the controller's real remote
scripts run on files in ``tmp_path``."""

from __future__ import annotations

from pathlib import Path

import pytest

from abtest.config.playbook import NodeProfile
from abtest.errors import NodeError
from abtest.node import remote_files as rf
from abtest.store.db import Store
from abtest.store.journal import RESTORED, Journal
from abtest.testing import FakeHost

CONFIG = b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


@pytest.fixture()
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path / "node", config=CONFIG)


@pytest.fixture()
def node(host: FakeHost) -> NodeProfile:
    return host.profile()


@pytest.fixture()
def original(node: NodeProfile) -> bytes:
    """The node's own kubelet, as the fake host made it."""
    return Path(node.kubelet_binary_path).read_bytes()


def _build(tmp_path: Path, name: str, body: bytes) -> str:
    path = tmp_path / "builds" / name / "kubelet"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    path.chmod(0o755)
    return str(path)


def _backup(node: NodeProfile) -> Path:
    return Path(node.kubelet_binary_path + ".abtest-original")


def _marker(node: NodeProfile) -> Path:
    return Path(str(_backup(node)) + ".marker")


def _binary(node: NodeProfile) -> bytes:
    return Path(node.kubelet_binary_path).read_bytes()


def test_the_killed_bisection_sequence_keeps_the_original(
    host: FakeHost, node: NodeProfile, original: bytes, tmp_path: Path
) -> None:
    """Issue 44's four steps: swap through database X (the good end identical to the node's
    own kubelet, then the bad end), the controller dies, a restore through the default
    database, then the bisection resumes through X: the original survives every step."""
    good = _build(tmp_path, "v1.36.3", original)
    bad = _build(tmp_path, "v1.36.3+bd4", original + b"# bd4\n")
    middle = _build(tmp_path, "v1.36.3+bd2", original + b"# bd2\n")
    x = tmp_path / "x.sqlite"
    with Store(x) as store:
        ctl = host.controller(store)
        ctl.install_kubelet_binary(good)
        ctl.install_kubelet_binary(bad)  # SIGKILL here: nothing closes
        assert _binary(node) == original + b"# bd4\n"
        marker = _marker(node).read_text()
        assert f"ours {rf.sha256(original)}" not in marker, "the original is never 'ours'"

    with Store(tmp_path / "default.sqlite") as other, host.controller(other) as ctl:
        assert ctl.restore().restored  # from the node's marker alone
    assert _binary(node) == original
    assert not _backup(node).exists() and not _marker(node).exists()

    with Store(x) as store:  # the resumed bisection: X still holds its entry
        with host.controller(store) as ctl:
            ctl.install_kubelet_binary(middle)
            assert _backup(node).read_bytes() == original, "a fresh backup before the copy"
            ctl.install_kubelet_binary(bad)
            rec = ctl.restore()
        assert rec.restored
        entries = Journal(store).history(node.node_name)
        stale = [
            e for e in entries if e.kind == "binary" and "outside this journal" in (e.detail or "")
        ]
        assert stale and stale[0].state == RESTORED
        assert Journal(store).pending(node.node_name, kind="binary") is None
    assert _binary(node) == original
    assert not _backup(node).exists() and not Path(node.lock_path).exists()


def test_a_build_identical_to_the_original_is_no_swap(
    host: FakeHost, node: NodeProfile, original: bytes, store: Store, tmp_path: Path
) -> None:
    same = _build(tmp_path, "v1.36.3", original)
    with host.controller(store) as ctl:
        ctl.install_kubelet_binary(same)
        assert not _backup(node).exists(), "nothing to keep: the bytes are the node's own"
        assert Journal(store).pending(node.node_name, kind="binary") is None
    assert not Path(node.lock_path).exists()


def test_the_identical_build_after_another_one_puts_the_original_back(
    host: FakeHost, node: NodeProfile, original: bytes, store: Store, tmp_path: Path
) -> None:
    other = _build(tmp_path, "v1.35.4", original + b"# older\n")
    same = _build(tmp_path, "v1.36.3", original)
    with host.controller(store) as ctl:
        ctl.install_kubelet_binary(other)
        ctl.install_kubelet_binary(same)
        assert _binary(node) == original
        # the kubelet process still runs `other` until a restart: the backup stays till then
        assert Journal(store).pending(node.node_name, kind="binary") is not None
        assert _backup(node).read_bytes() == original
        assert ctl.restore().restored  # the restart that runs it
        assert Journal(store).pending(node.node_name, kind="binary") is None
    assert not _backup(node).exists() and not _marker(node).exists()
    assert not Path(node.lock_path).exists()


def test_a_kill_after_the_original_is_back_but_before_the_restart_is_restored(
    host: FakeHost, node: NodeProfile, original: bytes, tmp_path: Path
) -> None:
    """The file is the original again but the kubelet still runs the candidate: the lock and
    the backup stay, and the next restore restarts the kubelet before it lets them go."""
    other = _build(tmp_path, "v1.35.4", original + b"# older\n")
    with Store(tmp_path / "x.sqlite") as x:
        ctl = host.controller(x)
        ctl.install_kubelet_binary(other)
        ctl.install_kubelet_binary(None)  # killed before the restart that runs it
    assert _binary(node) == original and _backup(node).exists()
    assert Path(node.lock_path).exists(), "a change still in effect keeps the lock"
    started = host.log.count("I kubelet started")
    with Store(tmp_path / "x.sqlite") as x, host.controller(x) as ctl:
        rec = ctl.restore()
    assert rec.restored
    assert host.log.count("I kubelet started") > started, "the original restarted"
    assert not _backup(node).exists() and not _marker(node).exists()
    assert not Path(node.lock_path).exists()


def test_a_pending_entry_whose_backup_is_gone_is_refused_over_a_foreign_binary(
    host: FakeHost, node: NodeProfile, original: bytes, store: Store, tmp_path: Path
) -> None:
    """The backup was removed and the node does not run the original: a copy over it would
    destroy the only original left, so nothing changes."""
    first = _build(tmp_path, "a", original + b"# a\n")
    second = _build(tmp_path, "b", original + b"# b\n")
    ctl = host.controller(store)
    ctl.install_kubelet_binary(first)
    _backup(node).unlink()  # someone's hand, or an older abtest's restore
    with pytest.raises(NodeError, match="nothing was changed"):
        ctl.install_kubelet_binary(second)
    assert _binary(node) == original + b"# a\n"


def _swapped_through_another_database(host: FakeHost, tmp_path: Path, original: bytes) -> None:
    """The node on a build of ours, its journal in a database the next command does not use."""
    bad = _build(tmp_path, "bad", original + b"# bad\n")
    with Store(tmp_path / "x.sqlite") as x:
        host.controller(x).install_kubelet_binary(bad)


def test_no_restore_reports_success_while_a_build_of_ours_runs_without_its_backup(
    host: FakeHost, node: NodeProfile, original: bytes, store: Store, tmp_path: Path
) -> None:
    """The state the issue found after step 4: a marker, no backup, the bad end running."""
    _swapped_through_another_database(host, tmp_path, original)
    _backup(node).unlink()
    with pytest.raises(NodeError, match=r"backup .* is gone"), host.controller(store) as ctl:
        ctl.restore()
    assert _binary(node) == original + b"# bad\n"
    assert _marker(node).exists(), "the marker still names the sha256 to match"


def test_a_marker_without_backup_over_the_original_is_cleared(
    host: FakeHost, node: NodeProfile, original: bytes, store: Store, tmp_path: Path
) -> None:
    _swapped_through_another_database(host, tmp_path, original)
    Path(node.kubelet_binary_path).write_bytes(original)  # put back by hand
    _backup(node).unlink()
    with host.controller(store) as ctl:
        rec = ctl.restore()
    assert not rec.restored and "nothing to restore" in rec.message
    assert not _marker(node).exists()
