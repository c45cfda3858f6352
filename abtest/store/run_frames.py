"""One stored run as plain frames: what ``abtest.analysis`` computes a report from, read in one
place so the analysis never holds a database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from abtest.store.db import Store


@dataclass(frozen=True)
class StoredRun:
    """A run's row and its tables' frames, freshly read: the reader may add columns."""

    run: dict[str, Any]  # the runs row
    rounds: pd.DataFrame
    arms: pd.DataFrame
    pods: pd.DataFrame  # with each pod's round's arm, size, block and flags
    visits: pd.DataFrame
    deltas: pd.DataFrame  # metric deltas, with their round's arm, size, block and flags
    events: pd.DataFrame  # per round, its events summed by (reason, type)


def read_run(store: Store, run_id: str) -> StoredRun:
    """Everything stored for ``run_id``; UserError for an unknown run (before any other read)."""
    run = dict(store.run_row(run_id))
    return StoredRun(
        run=run,
        rounds=store.rounds_frame(run_id),
        arms=store.arms_frame(run_id),
        pods=store.pods_frame(run_id),
        visits=store.visits_frame(run_id),
        deltas=store.metric_deltas_frame(run_id),
        events=store.events_frame(run_id),
    )
