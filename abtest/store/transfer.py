"""Moving runs between results databases (a laptop's SQLite file <-> the team's PostgreSQL).

A run travels as one JSON document holding every row the run owns: the run, its arms, visits
and rounds, and each round's pods, events, metric deltas and gap parts. The database-assigned
integer ids (visits, rounds) are renumbered on import and the references to them rewritten,
so two laptops' runs never clash; run ids are kept (they are unique by construction), and a
run id the database already has refuses the import (a stored run is never changed). An export
is untrusted input: abtest.store.import_check checks it against the schema first. The node
journal is not a run's: it describes a node's state and stays with the controller that
changed the node.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from abtest.errors import InputRefused, StoreConflict, UserError
from abtest.store.db import Store
from abtest.store.import_check import (
    MAX_PROBLEMS,
    ROUND_CHILDREN,
    Schema,
    check_document,
    read_schema,
    stored,
)
from abtest.store.schema import SCHEMA_VERSION

FORMAT = "abtest-runs"


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
    for table in ROUND_CHILDREN:
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
        for table in ROUND_CHILDREN:
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


_TODO = "nothing was imported; fix the file, or export the runs again with `abtest runs export`"


def import_runs(store: Store, document: Any, source: str = "the export") -> Imported:
    """Add the document's runs to the database, all in one transaction, after the whole
    document was checked against this database's schema (abtest.store.import_check): a bad
    value anywhere, or a run id the database already has, refuses the file and changes
    nothing. A stored run is never touched by an import."""
    schema = read_schema(store)
    problems = check_document(schema, document, format_name=FORMAT, version=SCHEMA_VERSION)
    if problems:
        _refuse(source, [f"{p.path}: {p.what}" for p in problems])
    items = document["runs"]
    ids = [str(item["run"]["id"]) for item in items]
    try:
        with store.transaction() as tx:
            # inside the transaction: another import of the same run waits, then collides
            taken = [
                f"runs[{i}].run.id: run {run_id!r} is already in {store.name} (left as it is; "
                "an import never changes a stored run)"
                for i, run_id in enumerate(ids)
                if tx.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone()
            ]
            if taken:
                _refuse(source, taken, "export only the runs it lacks: abtest runs export RUN...")
            for item in items:
                _import_run(schema, tx, item)
    except (StoreConflict, sqlite3.IntegrityError) as exc:
        _refuse(source, [f"a row collides with a stored one ({str(exc).splitlines()[0]})"])
    return Imported(ids)


def _refuse(source: str, lines: list[str], todo: str = _TODO) -> NoReturn:
    shown = lines[:MAX_PROBLEMS]
    if len(lines) > MAX_PROBLEMS:
        shown.append(f"and {len(lines) - MAX_PROBLEMS} more problems")
    raise InputRefused(source, shown, todo)


def _insert(tx: Any, schema: Schema, table: str, row: dict[str, Any], **fixed: Any) -> int:
    """One row; the column names come from the database's schema, the values are parameters,
    and ``fixed`` (the run's id, the new round id) replaces what the file says."""
    cols = [c for c in schema[table] if c in row and c != "id" and c not in fixed]
    values = [stored(schema[table][c], row[c]) for c in cols]
    cur = tx.execute(_insert_sql(table, [*cols, *fixed]), [*values, *fixed.values()])
    return int(cur.lastrowid or 0)


def _insert_sql(table: str, cols: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"


def _import_run(schema: Schema, tx: Any, item: dict[str, Any]) -> None:
    run_id = item["run"]["id"]
    cols = [c for c in schema["runs"] if c in item["run"]]  # the run keeps its id
    tx.execute(_insert_sql("runs", cols), [stored(schema["runs"][c], item["run"][c]) for c in cols])
    for arm in item["arms"]:
        _insert(tx, schema, "arms", arm, run_id=run_id)
    visit_ids: dict[int, int] = {}
    for visit in item["visits"]:
        visit_ids[visit["id"]] = _insert(tx, schema, "visits", visit, run_id=run_id)
    for rnd in item["rounds"]:
        visit = rnd.get("visit_id")
        round_id = _insert(
            tx, schema, "rounds", rnd, run_id=run_id,
            visit_id=visit_ids[visit] if visit is not None else None,
        )  # fmt: skip
        for table in ROUND_CHILDREN:
            batches: dict[tuple[str, ...], list[list[Any]]] = {}
            for row in rnd.get(table) or []:  # rows missing a column keep its default
                given = tuple(c for c in schema[table] if c in row)
                values = [stored(schema[table][c], row[c]) for c in given]
                batches.setdefault(given, []).append([round_id, *values])
            for given, rows in batches.items():
                tx.executemany(_insert_sql(table, ["round_id", *given]), rows)


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
