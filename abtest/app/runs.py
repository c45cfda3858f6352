"""`abtest runs`' use-cases: the stored runs as the Python API reads them, and `abtest runs
export / import`, which move runs between results databases through one file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from abtest.config.paths import write_output
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
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise UserError(f"cannot read the export: {exc.strerror}", where) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UserError("is not a regular file", where, "give a `runs export` file")
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > MAX_IMPORT_BYTES:
            raise UserError(
                f"is {info.st_size} bytes, more than an import takes ({MAX_IMPORT_BYTES})",
                where,
                "export fewer runs per file: abtest runs export RUN...",
            )
        try:
            data = handle.read(MAX_IMPORT_BYTES + 1)
        except OSError as exc:
            raise UserError(f"cannot read the export: {exc.strerror}", where) from None
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
