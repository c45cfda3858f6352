"""`abtest runs`' use-cases: the stored runs as the Python API reads them, and `abtest runs
export / import`, which move runs between results databases through one file."""

from __future__ import annotations

import json
from pathlib import Path

from abtest.errors import UserError
from abtest.results import Results
from abtest.store.db import DbTarget, Store
from abtest.store.transfer import Imported, export_runs, import_runs


def export_to_file(db: DbTarget, run_ids: list[str] | None, out: Path) -> int:
    """Write the runs (all when none are named) to ``out``; returns how many."""
    with Store(db) as store:
        document = export_runs(store, run_ids or None)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(document, sort_keys=True, default=str))
    tmp.replace(out)  # never half a file where the export was asked for
    return len(document["runs"])


def import_from_file(db: DbTarget, source: Path) -> Imported:
    try:
        document = json.loads(source.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the export ({exc})", str(source)) from None
    if not isinstance(document, dict):
        raise UserError("not an abtest runs export", str(source))
    with Store(db) as store:
        return import_runs(store, document)


def stored_runs(db: DbTarget) -> Results:
    """The runs of the database ``--db`` names (or ABTEST_DB, or the default one)."""
    return Results(Store(db))
