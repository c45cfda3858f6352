"""Writing rounds and runs into the results store, and `abtest runs` (no cluster needed)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from rounds import sample_round
from typer.testing import CliRunner

from abtest.batch.record import record_round
from abtest.batch.run_record import finish_run, git_revision, new_run, new_run_id
from abtest.cli.main import app
from abtest.config.paths import check_db_path
from abtest.stats.percentiles import nearest_rank
from abtest.store import db as store_db
from abtest.store.db import Store


def test_record_round_is_recomputable(store: Store) -> None:
    run_id = new_run(store, "batch", command="test", node_name="n1", env={"k": "v"})
    rid = record_round(store, run_id, sample_round(), ordinal=3, arm="baseline", block=2)
    rounds = store.rounds_frame(run_id)
    assert len(rounds) == 1
    r = rounds.iloc[0]
    assert (r["id"], r["arm"], r["ordinal"], r["block"], r["accepted"]) == (
        rid,
        "baseline",
        3,
        2,
        1,
    )
    assert (r["sandbox_failures"], r["watch_restarts"], r["pods_ready"]) == (2, 1, 7)
    pods = store.pods_frame(run_id)
    lat = (pods["ready_s"] - pods["sent_s"]).tolist()
    for q, col in ((50, "p50_s"), (95, "p95_s"), (99, "p99_s")):
        assert nearest_rank(lat, q) == r[col]
    assert r["batch_ready_s"] == pods["ready_s"].max() - pods["sent_s"].min()
    assert json.loads(r["phases_json"])["sandbox"] > 0
    ev = store.query("SELECT * FROM events WHERE round_id = ?", (rid,))
    assert [(e["reason"], e["count"]) for e in ev] == [("FailedCreatePodSandBox", 2)]
    assert len(store.metric_deltas_frame(run_id)) == 1
    finish_run(store, run_id)
    row = store.run_row(run_id)
    assert row["status"] == "finished" and row["finished_at"]
    assert json.loads(row["env_json"]) == {"k": "v"}


def test_failed_round_is_kept_with_reason(store: Store) -> None:
    run_id = new_run(store, "batch", command="test")
    record_round(store, run_id, sample_round(size=5, missing=2))
    r = store.rounds_frame(run_id).iloc[0]
    assert r["accepted"] == 0 and "2 of 5 pods never Ready" in r["reason"]
    assert r["p99_s"] is None or r["p99_s"] != r["p99_s"]  # NULL
    assert r["batch_ready_s"] is None or r["batch_ready_s"] != r["batch_ready_s"]
    assert len(store.pods_frame(run_id)) == 5


def test_run_ids_are_label_values() -> None:
    rid = new_run_id()
    assert len(rid) <= 63 and rid.replace("-", "").isalnum()
    rev = git_revision()
    assert rev is None or len(rev["commit"]) == 40


def test_runs_command_newest_first(store: Store) -> None:
    first = new_run(store, "batch", command="a")
    time.sleep(0.01)  # created_at has millisecond resolution
    second = new_run(store, "sweep", command="b")
    record_round(store, second, sample_round(size=2))
    out = CliRunner().invoke(app, ["runs", "--json", "--db", str(store.path)])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    assert [r["id"] for r in rows] == [second, first]
    assert rows[0]["rounds"] == 1 and rows[0]["accepted"] == 1
    table = CliRunner().invoke(app, ["runs", "--db", str(store.path)])
    assert table.exit_code == 0 and "sweep" in table.output


def test_an_open_database_file_is_never_opened_by_hand_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POSIX record locks belong to the process: opening and closing the database file by
    hand (the --db header check) while a connection is open drops that connection's locks,
    and it then reads a stale snapshot (seen on the lab: a test's journal stayed 'changed'
    after a forced restore in another process had marked it restored). The header check runs
    only while no connection of this process has the file open."""
    checked: list[Path] = []

    def check(path: Path, where: str) -> None:
        checked.append(path)
        check_db_path(path, where)

    monkeypatch.setattr(store_db, "check_db_path", check)
    db = tmp_path / "r.sqlite"
    first = Store(db)
    assert checked == [db]
    with Store(db) as second:  # the sweep's worker threads, a test's second reader
        assert second.query("SELECT 1")[0][0] == 1
    assert checked == [db]
    first.close()
    with Store(db):
        pass
    assert checked == [db, db]  # nothing of ours has it open any more: checked again
