"""The node lock and journal when the results database fails (issue 35), on the scripted fake
node: a restore the database cannot record still frees the lock; the next controller closes the
entry once the node proves it undone (abtest.node.settle); a lock whose holder is gone names the
exact command that frees it, and that command frees it; a kept lock carries its claim."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from abtest.errors import NodeLockedError, StoreError
from abtest.node.lock import LockInfo, new_info
from abtest.node.settle import SETTLED, settle, undone_on_node
from abtest.store.journal import APPLIED, RESTORED, Journal
from abtest.testing.host import FakeConnection, FakeHost
from abtest.testing.store import FaultyStore, writes


@pytest.fixture()
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path / "node")


@pytest.fixture()
def faulty(tmp_path: Path) -> Iterator[FaultyStore]:
    store = FaultyStore(tmp_path / "results.sqlite")
    yield store
    store.close()


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _plant_lock(host: FakeHost, **kw: Any) -> LockInfo:
    info = replace(new_info("a sweep that died"), pid=_dead_pid(), pid_start=None, **kw)
    host.lock_path.write_text(info.to_json())
    return info


@pytest.mark.parametrize("kind", ["disk full", "connection lost"])
def test_a_restore_the_store_cannot_record_still_frees_the_lock(
    host: FakeHost, faulty: FaultyStore, kind: str
) -> None:
    with host.controller(faulty) as ctl:
        ctl.apply({"kubeAPIQPS": 5})
        faulty.fail_at(writes("node_journal"), kind)
        rec = ctl.restore()
        assert rec.restored and "could not be closed" in rec.message
    host.verify()  # no lock, no backup: the lock never claims a change that is undone
    faulty.heal()
    left = Journal(faulty).pending(host.name)
    assert left is not None and left.state == APPLIED  # the write that failed
    with host.controller(faulty) as ctl:  # the next apply closes it by the node's proof
        ctl.apply({"kubeAPIQPS": 7})
        ctl.restore()
    states = [e.state for e in Journal(faulty).history(host.name)]
    assert states == [RESTORED, RESTORED]
    assert Journal(faulty).history(host.name)[1].detail == SETTLED
    host.verify()


def test_a_restore_the_store_cannot_read_uses_what_the_controller_knows(
    host: FakeHost, faulty: FaultyStore
) -> None:
    with host.controller(faulty) as ctl:
        ctl.apply({"featureGates.ContainerCheckpoint": True})
        faulty.fail_at(lambda op, t: True, "connection lost")  # the server is gone
        assert ctl.has_pending_change()
        assert ctl.restore().restored
    host.verify()


def test_the_store_back_before_close_gets_the_lagging_state(
    host: FakeHost, faulty: FaultyStore
) -> None:
    ctl = host.controller(faulty)
    with ctl:
        ctl.apply({"kubeAPIQPS": 5})
        faulty.fail_at(writes("node_journal"), "locked")
        ctl.restore()
        faulty.heal()  # another writer let go: close() writes what the journal missed
    assert Journal(faulty).pending(host.name) is None
    host.verify()


# each case: the node, and whether its pending entry is proven undone
UNDONE: list[tuple[str, Callable[[LockInfo], LockInfo | None], bool]] = [
    ("config back, no backup, no lock", lambda lk: None, True),
    ("a dead holder's lock of this change", lambda lk: lk, True),
    ("a holder elsewhere, not known gone", lambda lk: replace(lk, host="another-host"), False),
    ("another change's lock", lambda lk: replace(lk, token="f" * 16), False),
]


@pytest.mark.parametrize(("case", "lock_of", "undone"), UNDONE, ids=[c[0] for c in UNDONE])
def test_undone_on_node_needs_the_nodes_proof(
    host: FakeHost,
    faulty: FaultyStore,
    case: str,
    lock_of: Callable[[LockInfo], LockInfo | None],
    undone: bool,
) -> None:
    with host.controller(faulty) as ctl:
        ctl.apply({"kubeAPIQPS": 5})
        token = ctl.lock.held.token  # type: ignore[union-attr]
        faulty.fail_at(writes("node_journal"), "disk full")
        ctl.restore()
    faulty.heal()
    entry = Journal(faulty).pending(host.name)
    assert entry is not None
    dead = replace(new_info("x"), pid=_dead_pid(), pid_start=None, token=token)
    lock = lock_of(dead)
    conn = FakeConnection(host)
    assert undone_on_node(conn, entry, lock, sudo=False) is undone
    closed = settle(conn, Journal(faulty), host.name, lock, sudo=False)
    assert (closed is not None) is undone


@pytest.mark.parametrize("left", ["backup", "marker", "config"])
def test_a_change_still_on_the_node_is_never_closed(
    host: FakeHost, faulty: FaultyStore, left: str
) -> None:
    with host.controller(faulty) as ctl:
        ctl.apply({"kubeAPIQPS": 5})
        entry = Journal(faulty).pending(host.name)
        assert entry is not None
        conn = FakeConnection(host)
        backup = Path(entry.backup_path or "")
        if left != "backup":
            backup.unlink()
        if left != "marker":
            Path(str(backup) + ".marker").unlink()
        if left != "config":
            host.config_path.write_bytes(host.original)
        assert not undone_on_node(conn, entry, None, sudo=False)
        host.config_path.write_bytes(host.original)
        if left == "config":  # nothing but the config was left: now undone
            assert undone_on_node(conn, entry, None, sudo=False)


def test_a_dead_holders_lock_names_the_command_that_frees_it(
    host: FakeHost, faulty: FaultyStore
) -> None:
    _plant_lock(host)
    with host.controller(faulty) as ctl, pytest.raises(NodeLockedError) as err:
        ctl.apply({"kubeAPIQPS": 5})
    assert "`abtest node restore --profile fake`" in str(err.value)
    assert "not running: stale" in str(err.value)
    with host.controller(faulty) as ctl:  # the command it names, nothing pending
        rec = ctl.restore()
    assert not rec.restored and "freed the lock" in rec.message
    host.verify()


def test_a_kept_lock_of_a_dead_holder_is_undone_by_restore(
    host: FakeHost, faulty: FaultyStore
) -> None:
    with host.controller(faulty) as ctl:
        ctl.apply({"kubeAPIQPS": 5})
    kept = LockInfo.from_json(host.lock_path.read_text())
    assert kept.state == "kept" and kept.claim == {"kubeAPIQPS": 5}
    assert "abtest node restore --profile fake" in kept.purpose
    with host.controller(faulty) as ctl:
        assert ctl.restore().restored
    host.verify()


def test_restore_takes_over_a_dead_holders_lock_with_another_token(
    host: FakeHost, faulty: FaultyStore
) -> None:
    with host.controller(faulty) as ctl:
        ctl.apply({"kubeAPIQPS": 5})
    _plant_lock(host, token="e" * 16)  # a lock the journal entry does not name
    with host.controller(faulty) as ctl:
        assert ctl.restore().restored
    host.verify()


def test_a_live_holder_is_never_taken_over(host: FakeHost, faulty: FaultyStore) -> None:
    info = new_info("a sweep still running")  # this very process: alive
    host.lock_path.write_text(info.to_json())
    with host.controller(faulty) as ctl:
        rec = ctl.restore()
    assert "freed" not in rec.message
    assert json.loads(host.lock_path.read_text())["token"] == info.token
    host.lock_path.unlink()


def test_a_store_error_is_no_arms_fault(host: FakeHost, faulty: FaultyStore) -> None:
    """The journal cannot record the apply: rolled back, and the store's error (not an arm's
    "rolled back" failure, which a sweep would skip past) is what is raised."""
    faulty.fail_at(lambda op, t: op == "update" and t == "node_journal", "read-only")
    with host.controller(faulty) as ctl, pytest.raises(StoreError) as err:
        ctl.apply({"kubeAPIQPS": 5})
    assert "readonly" in str(err.value)
    host.verify()


def _claim_check(host: FakeHost, store: FaultyStore) -> tuple[bool, str]:
    """What `abtest node check` says of the lock's claim on this node."""
    from abtest.node.preflight import CheckReport, _claim
    from abtest.testing.host import FakeCluster

    profile = host.profile()
    held = LockInfo.from_json(host.lock_path.read_text())
    report = CheckReport(host.name)
    with host.session(profile) as node:
        cluster: Any = FakeCluster(host)
        report.add("lock's claim", lambda: _claim(profile, node, store, held, cluster))
    return report.items[0].ok, report.items[0].detail


def test_node_check_says_whether_the_running_kubelet_matches_the_locks_claim(
    host: FakeHost, faulty: FaultyStore
) -> None:
    with host.controller(faulty) as ctl:
        ctl.apply({"kubeAPIQPS": 5})  # exits with the change in effect: the lock is kept
    ok, detail = _claim_check(host, faulty)
    assert ok and "matches the lock's claim (kubeAPIQPS=5)" in detail
    # the config put back and the kubelet restarted by hand: the lock now misstates the node
    host.config_path.write_bytes(host.original)
    host.answer(["sh", "-c", "fake-kubelet restart"])
    ok, detail = _claim_check(host, faulty)
    assert not ok and "does not match the lock's claim" in detail and "kubeAPIQPS" in detail
    with host.controller(faulty) as ctl:
        assert ctl.restore().restored  # `abtest node restore` frees it
    host.verify()


def test_node_check_sees_a_backup_a_claimless_lock_does_not_name(
    host: FakeHost, faulty: FaultyStore
) -> None:
    _plant_lock(host)
    ok, detail = _claim_check(host, faulty)
    assert ok and "claims no change" in detail
    backup = Path(str(host.config_path) + ".abtest-original")
    backup.write_bytes(host.original)
    ok, detail = _claim_check(host, faulty)
    assert not ok and "is on the node" in detail
    backup.unlink()
    host.lock_path.unlink()
