"""A results-database fault at any point of a sweep (issue 35): the sweep stops with the store's
one-line error (exit 4 in the CLI), the node is restored, verified and unlocked as on every
other path, the finished rounds stay readable, and ``--resume`` finishes once the store is back,
with no hand step. The sweep runs the real NodeController on a scripted fake node
(abtest.testing.FakeHost) over a store that fails at a chosen point (abtest.testing.store)."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

from abtest.config.plan_options import PlanOptions
from abtest.engine.sweep import SweepOptions, SweepResult, run_sweep
from abtest.engine.sweep_plan import SweepPlan, build_plan
from abtest.errors import StoreError
from abtest.store.db import Store
from abtest.store.journal import APPLIED, RESTORED, Journal
from abtest.testing import FakeHost, FakeNode, HostKit, fake_profiles
from abtest.testing.store import FAULTS, FaultyStore, Point, anything, writes

ROUNDS = 10  # lab-sweep: 5 arms x 2 blocks, one size


def _plan(node: FakeNode) -> SweepPlan:
    plan = build_plan(PlanOptions(playbook="lab-sweep", rounds=2, sizes=(10,), seed=7))
    return dataclasses.replace(plan, profiles=fake_profiles(plan.profiles[0], [node]))


def _run(store: Store, host: FakeHost, resume: str | None = None) -> SweepResult:
    node = FakeNode(host.name)
    return run_sweep(
        _plan(node),
        store,
        SweepOptions(command="test"),
        lambda kind, data: None,
        resume_run_id=resume,
        kit=HostKit(host, node),
    )


def _run_id(store: Store) -> str:
    return str(store.query("SELECT id FROM runs")[0][0])


def _rounds(store: Store, run_id: str) -> int:
    return len(store.rounds_frame(run_id))


def _updates(table: str) -> Point:
    return lambda op, t: op == "update" and t == table


def _rounds_written() -> Point:
    return lambda op, t: op == "transaction"  # a round's rows, written together


# (moment of the sweep, point, matching statements let through first, fault): each moment
# of a lab-sweep run (10 rounds; 35 journal reads, 18 journal updates in all); every fault
# kind at the two moments a changed arm is in effect, one kind at each other moment
CASES: list[tuple[str, Point, int, str]] = [
    *(("third round's rows", _rounds_written(), 2, kind) for kind in sorted(FAULTS)),
    *(("journal marks an arm applied", _updates("node_journal"), 2, kind) for kind in FAULTS),
    ("first journal entry (before any change)", writes("node_journal"), 0, "read-only"),
    ("journal marks the first arm applied", _updates("node_journal"), 0, "disk full"),
    ("visit row after a change is in effect", writes("visits"), 2, "locked"),
    ("seventh round's rows", _rounds_written(), 6, "connection lost"),
    (
        "journal read before the last restore",
        lambda op, t: op == "query" and t == "node_journal",
        28,
        "connection lost",
    ),
    ("journal records the last restore", _updates("node_journal"), 17, "disk full"),
    ("every statement from round five on", anything(), 60, "connection lost"),
]


@pytest.mark.parametrize(
    ("where", "point", "after", "kind"), CASES, ids=[f"{c[0]}-{c[3]}" for c in CASES]
)
def test_a_store_fault_leaves_the_node_free_and_resume_finishes(
    tmp_path: Path, where: str, point: Point, after: int, kind: str
) -> None:
    host = FakeHost(tmp_path / "node")
    store = FaultyStore(tmp_path / "results.sqlite").fail_at(point, kind, after=after)
    try:
        with pytest.raises(StoreError) as err:
            _run(store, host)
        assert store.failures, where
        message = str(err.value)
        assert "\n" not in message and "Traceback" not in message
        host.verify()  # config, binary, running kubelet back; no backup, marker or lock file
        store.heal()
        run_id = _run_id(store)
        done = _rounds(store, run_id)  # the finished rounds are readable
        assert 0 <= done <= ROUNDS
        result = _run(store, host, resume=run_id)  # no hand step between
        assert result.status == "finished"
        assert _rounds(store, run_id) == ROUNDS
        journal = Journal(store)
        assert journal.pending(host.name) is None
        assert {e.state for e in journal.history(host.name)} <= {RESTORED, "abandoned"}
        host.verify()
    finally:
        store.close()


def test_a_real_sqlite_disk_full_mid_sweep_is_one_store_error(tmp_path: Path) -> None:
    """SQLite's own "database or disk is full" (a page cap, as a full filesystem gives it):
    translated, the node restored and unlocked, the lock never kept for a change undone."""
    host = FakeHost(tmp_path / "node")
    store = Store(tmp_path / "results.sqlite")
    rounds = 0

    def fill_after_two(kind: str, data: object) -> None:
        nonlocal rounds
        if kind == "round_done":
            rounds += 1
            if rounds == 2:  # a changed arm is in effect from the first visit on
                store.conn.execute("VACUUM")  # no free pages left to grow into
                pages = store.query("PRAGMA page_count")[0][0]
                store.conn.execute(f"PRAGMA max_page_count = {pages}")

    node = FakeNode(host.name)
    with pytest.raises(StoreError, match="database or disk is full"):
        run_sweep(
            _plan(node),
            store,
            SweepOptions(command="test"),
            fill_after_two,
            kit=HostKit(host, node),
        )
    host.verify()
    store.close()
    with Store(tmp_path / "results.sqlite") as again:  # the disk has room again
        run_id = _run_id(again)
        assert 2 <= _rounds(again, run_id) < ROUNDS  # the last pages' slack took a few more
        # "restored" written, or (no room even for that) closed by the next run
        assert Journal(again).history(host.name)[0].state in (APPLIED, RESTORED)
        assert _run(again, host, resume=run_id).status == "finished"
        assert Journal(again).pending(host.name) is None
        assert _rounds(again, run_id) == ROUNDS
    host.verify()


@pytest.mark.parametrize(
    ("pragma", "message"),
    [
        ("PRAGMA query_only = 1", "attempt to write a readonly database"),
        ("PRAGMA max_page_count = 1", "database or disk is full"),
    ],
)
def test_sqlite_faults_are_one_line_store_errors(tmp_path: Path, pragma: str, message: str) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        store.conn.execute(pragma)
        with pytest.raises(StoreError, match=message) as err:
            store.insert(
                "runs",
                {"id": "x" * 4000, "kind": "sweep", "status": "running", "created_at": "now"},
            )
        assert "--resume" in str(err.value) and "\n" not in str(err.value)
        assert not isinstance(err.value.__cause__, sqlite3.IntegrityError)


def test_a_locked_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    Store(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with Store(path) as store:
            store.conn.execute("PRAGMA busy_timeout = 50")
            with pytest.raises(StoreError, match="database is locked"):
                store.update("runs", {"id": "x"}, {"status": "failed"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
