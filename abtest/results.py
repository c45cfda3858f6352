"""The results database as a Python API, for a notebook or a script: no SQL to read.

    import abtest
    with abtest.open_results("results.sqlite") as res:
        runs = res.runs()                                # one row per run, newest first
        run_id = runs["id"].iloc[0]
        rounds = res.rounds(run_id)                      # one row per round
        pods = res.pods(run_id)                          # one row per pod, with its round's arm
        for c in res.comparisons(run_id):                # abtest.stats.Comparison
            print(c.arm, c.size, c.metric, c.pct_reduction, c.pct_ci)

Frames are pandas DataFrames with the database's columns (times in seconds; see
``abtest.store.schema``); comparisons are the dataclasses ``abtest report`` renders, computed
the same way (accepted, non-warm-up rounds; blocks paired; Holm within a table; a run that ran
until resolved read at its corrected level). Opening never creates or changes a database
other than migrating an older one to this version's schema.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from abtest.errors import UserError
from abtest.store.db import Store, default_path

if TYPE_CHECKING:
    import pandas as pd

    from abtest.stats.compare import Comparison
    from abtest.stats.gate import GateResult


class Results:
    """An open results database (one SQLite connection: use it from the thread that opened
    it). Close it, or use it as a context manager."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.path = store.path

    def runs(self) -> pd.DataFrame:
        """Every run, newest first: id, kind, status, created_at, finished_at, node_name,
        playbook_name, design, rounds and accepted (counts)."""
        return self._store.runs_frame()

    def rounds(self, run_id: str) -> pd.DataFrame:
        """Every round of the run (warm-ups and rejected rounds too: see ``accepted`` and
        ``warmup``), in the order they ran."""
        self._store.run_row(run_id)  # UserError naming the database for an unknown run
        return self._store.rounds_frame(run_id)

    def pods(self, run_id: str) -> pd.DataFrame:
        """Every pod of the run with its timestamps, and its round's arm, size, block,
        warmup and accepted."""
        self._store.run_row(run_id)
        return self._store.pods_frame(run_id)

    def comparisons(
        self, run_id: str, *, baseline: str | None = None, confidence: float = 0.95
    ) -> list[Comparison]:
        """Each arm vs the baseline per size and metric, as ``abtest report`` shows them."""
        from abtest.report.model import build_model

        model = build_model(self._store, run_id, baseline=baseline, confidence=confidence)
        return list(model.comparisons)

    def gate(
        self,
        reference_run: str,
        candidate_run: str,
        *,
        margin_pct: float = 5.0,
        metrics: tuple[str, ...] = ("batch_ready_s",),
        confidence: float = 0.95,
    ) -> GateResult:
        """The regression verdict of two stored runs on one node (``abtest regress
        --reference-run --candidate-run``): unpaired, since blocks of two runs do not pair."""
        from abtest.experiment.regress import gate_from_frame, rounds_of_two_runs

        frame = rounds_of_two_runs(self._store, reference_run, candidate_run)
        return gate_from_frame(
            frame,
            reference="reference",
            candidate="candidate",
            sizes=None,
            metrics=list(metrics),
            margin_pct=margin_pct,
            confidence=confidence,
            source=f"runs {reference_run} (reference) vs {candidate_run} (candidate)",
        )

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Results:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_results(path: str | Path | None = None) -> Results:
    """The results database at ``path`` (default: ``$ABTEST_DB``, else the per-user one).
    UserError if there is none: a sweep or ``abtest batch`` creates it."""
    chosen = Path(path).expanduser() if path is not None else default_path()
    if not chosen.is_file():
        raise UserError(
            "no results database here",
            str(chosen),
            "give the path of one (abtest runs --db PATH lists its runs), or set ABTEST_DB",
        )
    return Results(Store(chosen))
