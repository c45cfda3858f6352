"""`abtest runs`' use-cases: the stored runs as the Python API reads them, and `abtest runs
export / import`, which move runs between results databases through one file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from abtest.config.paths import read_input, write_output
from abtest.errors import UserError
from abtest.results import Results
from abtest.store.db import DbTarget, Store
from abtest.store.transfer import Imported, export_runs, import_runs


def export_to_file(db: DbTarget, run_ids: list[str] | None, out: Path) -> int:
    """Write the runs (all when none are named) to ``out``; returns how many."""
    with Store(db) as store:
        document = export_runs(store, run_ids or None)
    # atomic, and only over a regular file (never a device, a link or a FIFO)
    write_output(out, json.dumps(document, sort_keys=True, default=str), "--out")
    return len(document["runs"])


MAX_IMPORT_BYTES = 256 * 2**20  # an export of many runs is tens of MB; this is no export


def read_export(source: Path) -> Any:
    """The JSON of an export file: a regular file (never a FIFO or a device, which would
    block or never end), at most MAX_IMPORT_BYTES, valid UTF-8 JSON."""
    where = str(source)
    data = read_input(
        source,
        where,
        "give a `runs export` file; for fewer runs per file: abtest runs export RUN... -o FILE",
        MAX_IMPORT_BYTES,
        allowed=f"an import takes ({MAX_IMPORT_BYTES})",
    )
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UserError(f"is not UTF-8 text (byte {exc.start})", where) from None
    except json.JSONDecodeError as exc:
        raise UserError(
            f"is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", where
        ) from None
    except (ValueError, RecursionError) as exc:  # nested too deep, an integer too long
        raise UserError(f"is not JSON this tool reads: {type(exc).__name__}", where) from None


def import_from_file(db: DbTarget, source: Path) -> Imported:
    """Add the runs of an export file to the database: the whole file or nothing."""
    document = read_export(source)
    with Store(db) as store:
        return import_runs(store, document, str(source))


def stored_runs(db: DbTarget) -> Results:
    """The runs of the database ``--db`` names (or ABTEST_DB, or the default one)."""
    return Results(Store(db))
