"""The shared results database on a real PostgreSQL server (tests/pg_server.py): the same
schema and migrations as SQLite, two controllers writing at once, a reader that never sees
half a round, a connection killed mid-sweep (the node restored, the run failed, --resume
finishing it), runs moved between SQLite and PostgreSQL without loss, and bad URLs."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pg_server import PgServer
from typer.testing import CliRunner

from abtest.batch.run_record import new_run
from abtest.cli.main import app
from abtest.config.plan_options import PlanOptions
from abtest.engine.sweep import SweepOptions, run_sweep
from abtest.engine.sweep_plan import build_plan
from abtest.errors import StoreConnectionLost, UserError
from abtest.store.db import Store, _statements
from abtest.store.journal import RESTORED, Journal
from abtest.store.node_history import base_config
from abtest.store.pg import PgConnection, pg_ddl
from abtest.store.schema import MIGRATIONS, SCHEMA_VERSION
from abtest.store.transfer import comparable, export_runs, import_runs
from abtest.testing import FakeHost, FakeKit, FakeNode, HostKit, fake_profiles

pytestmark = pytest.mark.postgres
TESTS = Path(__file__).parents[2]


def _columns(store: Store) -> dict[str, list[str]]:
    if store.postgres:
        rows = store.query(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name <> 'abtest_schema' "
            "ORDER BY table_name, ordinal_position"
        )
    else:
        rows = store.query(
            "SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p "
            "WHERE m.type = 'table' ORDER BY m.name, p.cid"
        )
    out: dict[str, list[str]] = {}
    for table, column in rows:
        out.setdefault(str(table), []).append(str(column))
    return out


def test_the_same_schema_and_version_on_both_databases(pg_url: str, store: Store) -> None:
    with Store(pg_url) as pg:
        assert pg.postgres and pg._version() == SCHEMA_VERSION == store._version()
        assert _columns(pg) == _columns(store)
    with Store(pg_url) as again:  # opening a migrated database changes nothing
        assert again._version() == SCHEMA_VERSION


def test_a_schema_newer_than_the_tool_is_refused(pg_url: str) -> None:
    with Store(pg_url) as pg:
        pg.conn.set_schema_version(SCHEMA_VERSION + 1)
    with pytest.raises(UserError, match=f"schema v{SCHEMA_VERSION + 1}"):
        Store(pg_url)


def test_a_v3_database_migrates_and_its_journal_names_runs_from_then_on(pg_url: str) -> None:
    """The journal's run id (v4) on PostgreSQL: a v3 database migrates keeping its journal
    (found by the run's time window), and a new run's base config is found by its id."""
    conn = PgConnection(pg_url)
    with conn.transaction():
        for statement in _statements("".join(MIGRATIONS[:3])):
            conn.execute(pg_ddl(statement))
        assert conn.schema_version() == 0  # a fresh database (and the version's table)
        conn.set_schema_version(3)
        conn.execute(
            "INSERT INTO runs (id, kind, created_at, finished_at, status) VALUES (?, 'sweep', "
            "'2025-01-01T00:00:00.000+00:00', '2025-01-01T01:00:00.000+00:00', 'finished')",
            ("r1",),
        )
        conn.execute(
            "INSERT INTO node_journal (node_name, profile_name, kind, path, original, "
            "original_sha256, applied_json, state, created_at, updated_at) VALUES "
            "('n1', 'p', 'config', '/c', ?, 'x', '{}', 'restored', ?, ?)",
            (b"found by r1\n", "2025-01-01T00:10:00.000+00:00", "2025-01-01T00:50:00"),
        )
    conn.close()
    with Store(pg_url) as pg:
        assert pg._version() == SCHEMA_VERSION >= 4
        [old] = Journal(pg).history("n1")
        assert old.run_id is None and base_config(pg, "r1", "n1") == b"found by r1\n"
        first, second = new_run(pg, "sweep", node_name="n1"), new_run(pg, "sweep", node_name="n1")
        for run_id in (first, second):
            Journal(pg, run_id=run_id).begin(
                node_name="n1", profile_name="p", path="/c", original=run_id.encode(), applied={}
            )
        assert base_config(pg, second, "n1") == second.encode()  # not the first's, in its window
        assert base_config(pg, first, "n1") == first.encode()


def _sweep_plan(node: FakeNode, rounds: int = 2) -> Any:
    plan = build_plan(PlanOptions(playbook="lab-sweep", rounds=rounds, sizes=(10,), seed=7))
    return dataclasses.replace(plan, profiles=fake_profiles(plan.profiles[0], [node]))


def test_two_controllers_write_at_once_and_a_reader_never_sees_half_a_round(
    pg_url: str,
) -> None:
    """Two processes, each a whole sweep on its own (fake) node, into one database, while
    this process reads it in snapshots: every round seen has all its pods."""
    start = time.time() + 2.0  # both connect first, then write from the same moment
    procs = [
        subprocess.Popen(
            [sys.executable, str(TESTS / "pg_controller.py"), pg_url, node, str(start), "3"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in ("node-a", "node-b")
    ]
    seen: list[int] = []
    partial: list[Any] = []
    stop = threading.Event()

    def read() -> None:
        with Store(pg_url) as reader:
            while not stop.is_set():
                with reader.snapshot():
                    rows = reader.query(
                        "SELECT r.id, r.size, (SELECT COUNT(*) FROM pods p WHERE "
                        "p.round_id = r.id) FROM rounds r"
                    )
                seen.append(len(rows))
                partial.extend(r for r in rows if int(r[1]) != int(r[2]))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        stop.set()
        reader.join()
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-2000:]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert {r["status"] for r in results} == {"finished"}
    assert len({r["run_id"] for r in results}) == 2  # run ids never collide
    assert not partial, partial
    assert len(set(seen)) > 2  # the reader did watch rounds arrive
    with Store(pg_url) as pg:
        for r in results:
            rows = pg.query(
                "SELECT node_name, COUNT(*) FROM rounds WHERE run_id = ? GROUP BY node_name",
                (r["run_id"],),
            )
            assert len(rows) == 1 and int(rows[0][1]) == r["rounds"] == 30  # 5 arms x 3 x 2
            assert pg.run_row(r["run_id"])["status"] == "finished"


def test_a_connection_killed_mid_sweep_fails_the_run_restores_the_node_and_resume_ends_it(
    tmp_path: Path, pg_url: str, pg_server: PgServer
) -> None:
    host = FakeHost(tmp_path / "node")
    node = FakeNode(host.name)
    plan = _sweep_plan(node)
    events: list[str] = []
    store = Store(pg_url)
    killed: list[int] = []

    def emit(kind: str, data: Any) -> None:
        events.append(kind)
        if kind == "round_done" and events.count("round_done") == 3 and not killed:
            killed.append(store.conn.backend_pid())
            pg_server.terminate(killed[0])  # the server side of this controller's connection

    with pytest.raises(StoreConnectionLost, match="connection lost"):
        run_sweep(plan, store, SweepOptions(command="t"), emit, kit=HostKit(host, node))
    assert killed and "restored" in events  # the always-restore path ran
    host.verify()  # the node is as found
    assert [e.state for e in Journal(store).history(host.name)] == [RESTORED]
    (row,) = store.query("SELECT id, status, stop_reason FROM runs")
    assert row["status"] == "failed" and "connection lost" in row["stop_reason"]
    run_id = str(row["id"])
    done = store.rounds.done_keys(run_id, host.name)
    assert len(done) == 3  # the round in flight was rolled back whole, never half stored
    assert store.query(
        "SELECT COUNT(*) FROM rounds r WHERE (SELECT COUNT(*) FROM pods p "
        "WHERE p.round_id = r.id) <> r.size"
    )[0][0] == 0  # fmt: skip

    node2 = FakeNode(host.name)
    result = run_sweep(
        _sweep_plan(node2), store, SweepOptions(command="t"), lambda k, d: None,
        resume_run_id=run_id, kit=HostKit(host, node2),
    )  # fmt: skip
    assert result.status == "finished" and result.run_id == run_id
    assert len(store.rounds.done_keys(run_id, host.name)) == 10  # 5 arms x 2 blocks
    assert store.run_row(run_id)["status"] == "finished"
    host.verify()
    store.close()


def _fake_run(store: Store, node_name: str = "node-a") -> str:
    node = FakeNode(node_name)
    return run_sweep(
        _sweep_plan(node), store, SweepOptions(command="t"), lambda k, d: None, kit=FakeKit(node)
    ).run_id


def test_runs_move_between_sqlite_and_postgres_without_loss(
    tmp_path: Path, pg_url: str, store: Store
) -> None:
    run_id = _fake_run(store)
    store.insert(  # an event, so every table a round owns has a row
        "events", {"round_id": 1, "pod": "p0", "reason": "Pulled", "message": "m", "type": "N"}
    )
    first = export_runs(store, [run_id])
    with Store(pg_url) as pg:
        assert import_runs(pg, first).added == [run_id]
        with pytest.raises(UserError, match="already in"):  # twice changes nothing
            import_runs(pg, first)
        second = export_runs(pg)
    assert comparable(second) == comparable(first)
    back = Store(tmp_path / "back.sqlite")
    import_runs(back, json.loads(json.dumps(second)))
    assert comparable(export_runs(back)) == comparable(first)
    back.close()


def test_runs_export_and_import_on_the_command_line(
    tmp_path: Path, pg_url: str, store: Store
) -> None:
    run_id = _fake_run(store)
    out = tmp_path / "runs.json"
    runner = CliRunner()
    r = runner.invoke(app, ["runs", "export", run_id, "--db", str(store.path), "--out", str(out)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["runs", "import", str(out), "--db", pg_url])
    assert r.exit_code == 0 and run_id in r.output, r.output
    r = runner.invoke(app, ["runs", "--json", "--db", pg_url])
    assert r.exit_code == 0 and json.loads(r.output)[0]["id"] == run_id
    r = runner.invoke(app, ["report", run_id, "--db", pg_url, "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "rep" / "report.md").is_file()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql://ann:s3cret-pw@127.0.0.1:1/results", "cannot reach"),
        ("postgresql://ann:s3cret-pw@127.0.0.1:notaport/results", "does not parse"),
        ("postgresql://ann:s3cret-pw@[::1/results", "does not parse"),
        ("postgresql://ann:s3cret-pw@127.0.0.1:5432/results?sslmode=bogus", "invalid sslmode"),
    ],
)
def test_a_bad_database_url_is_one_line_exit_4_and_no_password(
    pg_server: PgServer, url: str, says: str
) -> None:
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "abtest"), "runs", "--db", url],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 4, proc.stderr
    assert says in proc.stderr and "s3cret" not in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_history_and_pooling_read_the_shared_database(pg_url: str) -> None:
    from history_store import NODE, add_runs

    from abtest.app.history import HistoryRequest, history
    from abtest.app.report import build_pooled_model

    with Store(pg_url) as pg:
        ids = add_runs(pg, [5.0] * 5 + [5.6] * 5, kubelet=["v1"] * 5 + ["v2"] * 5)
        a, b = _fake_run(pg, "node-a"), _fake_run(pg, "node-b")
        model = build_pooled_model(pg, [a, b])
    h = history(HistoryRequest(node=NODE, db=pg_url))
    (cp,) = h.change_points
    assert cp.run_id == ids[5] and h.changed[0]["kubelet_version"] == ["v1", "v2"]
    assert model.fleet is not None and model.fleet.nodes == ("node-a", "node-b")
