"""Moving runs between results databases (a laptop's SQLite file <-> the team's PostgreSQL).

A run travels as one JSON document holding every row the run owns: the run, its arms, visits
and rounds, and each round's pods, events, metric deltas and gap parts. The database-assigned
integer ids (visits, rounds) are renumbered on import and the references to them rewritten,
so two laptops' runs never clash; run ids are kept (they are unique by construction). The node
journal is not a run's: it describes a node's state and stays with the controller that
changed the node.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from abtest.errors import UserError
from abtest.store.db import Store
from abtest.store.schema import SCHEMA_VERSION

FORMAT = "abtest-runs"
# a round's own rows: table -> its columns' source is SELECT *
_ROUND_CHILDREN = ("pods", "events", "metric_deltas", "round_gaps")


def _rows(store: Store, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
    out = []
    for row in store.query(sql, params):
        rec = {k: row[k] for k in row.keys()}  # noqa: SIM118 (a row iterates its values)
        for k, v in rec.items():
            if isinstance(v, bytes | memoryview):
                rec[k] = bytes(v).hex()
        out.append(rec)
    return out


def export_runs(store: Store, run_ids: Iterable[str] | None = None) -> dict[str, Any]:
    """The runs (all when ``run_ids`` is None) as one JSON-ready document, read in one
    snapshot (a run being written by another controller is taken as of one moment)."""
    with store.snapshot():
        ids = list(run_ids) if run_ids is not None else [
            str(r[0]) for r in store.query("SELECT id FROM runs ORDER BY created_at, id")
        ]  # fmt: skip
        runs = [_export_run(store, run_id) for run_id in ids]
    return {"format": FORMAT, "schema": SCHEMA_VERSION, "runs": runs}


def _export_run(store: Store, run_id: str) -> dict[str, Any]:
    run = _rows(store, "SELECT * FROM runs WHERE id = ?", (run_id,))
    if not run:
        raise UserError(f"no run {run_id!r}", str(store.name), "see `abtest runs`")
    arms = _rows(
        store, f"SELECT * FROM arms WHERE run_id = ? ORDER BY {store.insertion_order}", (run_id,)
    )
    rounds = _rows(store, "SELECT * FROM rounds WHERE run_id = ? ORDER BY id", (run_id,))
    children: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for table in _ROUND_CHILDREN:
        by_round: dict[int, list[dict[str, Any]]] = {}
        rows = _rows(
            store,
            f"SELECT c.* FROM {table} c JOIN rounds r ON r.id = c.round_id "
            "WHERE r.run_id = ? ORDER BY c.round_id",
            (run_id,),
        )
        for rec in rows:
            by_round.setdefault(int(rec.pop("round_id")), []).append(rec)
        for recs in by_round.values():  # events have no key: one order for every database
            recs.sort(key=lambda r: json.dumps(r, sort_keys=True, default=str))
        children[table] = by_round
    for rnd in rounds:
        for table in _ROUND_CHILDREN:
            rnd[table] = children[table].get(int(rnd["id"]), [])
    return {
        "run": run[0],
        "arms": arms,
        "visits": _rows(store, "SELECT * FROM visits WHERE run_id = ? ORDER BY id", (run_id,)),
        "rounds": rounds,
    }


@dataclass(frozen=True)
class Imported:
    added: list[str]
    skipped: list[str]  # already in the target database (same id): left as they are


def import_runs(store: Store, document: dict[str, Any]) -> Imported:
    """Insert the document's runs, each in one transaction (all of a run or none of it).
    A run id the database already has is skipped, so importing twice changes nothing."""
    if document.get("format") != FORMAT:
        raise UserError("not an abtest runs export", None, "make one with `abtest runs export`")
    schema = int(document.get("schema", 0))
    if schema > SCHEMA_VERSION:
        raise UserError(
            f"the export is schema v{schema}, this abtest knows up to v{SCHEMA_VERSION}",
            None,
            "upgrade abtest",
        )
    added, skipped = [], []
    for item in document.get("runs", []):
        run_id = str(item["run"]["id"])
        if store.query("SELECT id FROM runs WHERE id = ?", (run_id,)):
            skipped.append(run_id)
            continue
        with store.transaction() as tx:
            _import_run(store, tx, item)
        added.append(run_id)
    return Imported(added, skipped)


def _insert(store: Store, tx: Any, table: str, row: dict[str, Any], *, new_id: bool) -> int:
    cols = [c for c in row if not (new_id and c == "id")]
    sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"
    cur = tx.execute(sql, [_value(table, c, row[c]) for c in cols])
    return int(cur.lastrowid or 0)


def _value(table: str, column: str, value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value


def _import_run(store: Store, tx: Any, item: dict[str, Any]) -> None:
    _insert(store, tx, "runs", item["run"], new_id=False)
    for arm in item["arms"]:
        _insert(store, tx, "arms", arm, new_id=False)
    visit_ids: dict[int, int] = {}
    for visit in item["visits"]:
        visit_ids[int(visit["id"])] = _insert(store, tx, "visits", visit, new_id=True)
    for rnd in item["rounds"]:
        row = {k: v for k, v in rnd.items() if k not in _ROUND_CHILDREN}
        if row.get("visit_id") is not None:
            row["visit_id"] = visit_ids[int(row["visit_id"])]
        round_id = _insert(store, tx, "rounds", row, new_id=True)
        for table in _ROUND_CHILDREN:
            rows = rnd.get(table) or []
            if not rows:
                continue
            cols = ["round_id", *rows[0]]
            sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"
            tx.executemany(sql, [[round_id, *(r.get(c) for c in cols[1:])] for r in rows])


def comparable(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The document's runs without the database-assigned ids (what must survive a move)."""
    out = []
    for item in document["runs"]:
        order = {int(v["id"]): i for i, v in enumerate(item["visits"])}
        visits = [{k: v for k, v in vis.items() if k != "id"} for vis in item["visits"]]
        rounds = []
        for rnd in item["rounds"]:
            row = {k: v for k, v in rnd.items() if k != "id"}
            if row.get("visit_id") is not None:
                row["visit_id"] = order[int(row["visit_id"])]
            rounds.append(row)
        out.append({"run": item["run"], "arms": item["arms"], "visits": visits, "rounds": rounds})
    return out
