"""`abtest report`'s use-case: the report model of one stored run, or of several pooled as one
fleet run. It reads the results database only; the CLI writes the files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from abtest.config.paths import check_db_path
from abtest.errors import UserError
from abtest.report.model import ReportModel, build_model, build_pooled_model
from abtest.store.db import DbTarget, Store, resolve


def checked_db(db: str | None, flag: str) -> DbTarget:
    """The database ``--db`` (or ABTEST_DB, or the default) names; a SQLite file's path is
    checked (a postgresql:// URL has no path to check)."""
    target = resolve(db)
    if isinstance(target, Path):
        check_db_path(target, flag if db else str(target))
    return target


def report_model(
    db: str | None,
    run_ids: Sequence[str],
    *,
    baseline: str | None,
    confidence: float,
) -> ReportModel:
    """The model of the run (two or more: the pooled fleet run) as every format renders it."""
    target = resolve(db)
    if isinstance(target, Path) and not target.is_file():
        raise UserError(
            "no results database here",
            str(target),
            "give --db PATH or set ABTEST_DB; a sweep or `abtest batch` creates it",
        )
    with Store(db) as store, store.snapshot():
        if len(run_ids) > 1:
            return build_pooled_model(
                store, list(run_ids), baseline=baseline, confidence=confidence
            )
        return build_model(store, run_ids[0], baseline=baseline, confidence=confidence)
