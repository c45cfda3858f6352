"""`abtest report`'s use-case: the report model of one stored run, or of several pooled as one
fleet run. It reads the results database only; the CLI writes the files."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from abtest.analysis.bisect import BisectModel
from abtest.analysis.pool import check_pool_ids, pool_runs
from abtest.analysis.report_model import ReportModel, model_of
from abtest.analysis.run_data import run_data
from abtest.config.paths import check_db_path
from abtest.errors import UserError
from abtest.stats.intervals import check_confidence
from abtest.store.db import DbTarget, Store, resolve
from abtest.store.run_frames import read_run


def build_model(
    store: Store, run_id: str, *, baseline: str | None = None, confidence: float = 0.95
) -> ReportModel:
    """The report of ``run_id``. UserError for an unknown run or an unknown ``baseline``."""
    check_confidence(confidence)
    return model_of(run_data(read_run(store, run_id)), baseline=baseline, confidence=confidence)


def build_pooled_model(
    store: Store, run_ids: list[str], *, baseline: str | None = None, confidence: float = 0.95
) -> ReportModel:
    """Runs of several controllers on disjoint nodes, reported as one fleet run
    (``abtest.analysis.pool``: UserError naming what differs when they do not pool)."""
    check_confidence(confidence)
    check_pool_ids(run_ids)
    pooled = pool_runs([run_data(read_run(store, r)) for r in run_ids])
    model = model_of(pooled, baseline=baseline, confidence=confidence)
    note = f"pooled from {len(run_ids)} runs on disjoint nodes: {', '.join(run_ids)}"
    return dataclasses.replace(model, notes=(note, *model.notes))


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


def bisection_of(db: str | None, run_ids: Sequence[str]) -> BisectModel | None:
    """The bisection whose first run is the one run asked for (None: an ordinary run)."""
    if len(run_ids) != 1:
        return None
    from abtest.analysis.bisect import ENTRY

    target = resolve(db)
    if isinstance(target, Path) and not target.is_file():
        return None  # report_model says what is missing
    with Store(db) as store, store.snapshot():
        entry = store.runs.plan(run_ids[0]).get(ENTRY) if _known(store, run_ids[0]) else None
        if not isinstance(entry, dict) or "settings" not in entry:
            return None
        from abtest.app.bisect import bisection_model

        return bisection_model(store, run_ids[0])


def _known(store: Store, run_id: str) -> bool:
    try:
        store.run_row(run_id)
    except UserError:
        return False
    return True
