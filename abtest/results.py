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

import json
import math
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from abtest.errors import UserError
from abtest.store.db import Store, resolve

if TYPE_CHECKING:
    import pandas as pd

    from abtest.stats.compare import Comparison
    from abtest.stats.regress_result import RegressResult


# where `abtest report` writes by default (reports/RUN_ID/)
REPORTS = Path("reports")


@dataclass(frozen=True)
class RunDetail:
    """One run as `abtest runs show` describes it: status, nodes, playbook, arms with their
    settings, sizes, blocks done of planned, rounds (accepted / all) per arm and size, and
    where its report is (``report``: directory, files there, the command that renders it)."""

    id: str
    kind: str
    status: str
    stop_reason: str | None
    created_at: str
    finished_at: str | None
    node: str | None
    nodes: list[str]
    profile: str | None
    playbook: str | None
    design: str | None
    seed: int | None
    command: str | None
    arms: list[dict[str, Any]]
    sizes: list[int]
    blocks_planned: int | None
    blocks_with_rounds: int
    rounds: list[dict[str, Any]]
    report: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _clean(value: Any) -> Any:
    """A JSON-safe scalar: NaN is null, numpy scalars are plain numbers."""
    if hasattr(value, "item"):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _stored_json(text: Any, empty: Any) -> Any:
    """A stored JSON column of the same shape as ``empty``; the text as it is when it is not
    (junk a hand edit or an old import left: shown, never a traceback)."""
    try:
        value = json.loads(text) if isinstance(text, str) and text else empty
    except (ValueError, RecursionError):
        return text
    return value if isinstance(value, type(empty)) else text


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as JSON-safe dicts."""
    return [{str(k): _clean(v) for k, v in rec.items()} for rec in frame.to_dict(orient="records")]


class Results:
    """An open results database (one SQLite connection: use it from the thread that opened
    it). Close it, or use it as a context manager."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.path = store.name

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

    def detail(self, run_id: str, reports: Path = REPORTS) -> RunDetail:
        """One run in detail (``reports``: where its rendered report would be)."""
        row = self._store.run_row(run_id)
        plan = self._store.runs.plan(run_id)  # {} for junk: the rest of the run stands
        stored_schedule = plan.get("schedule")
        schedule = stored_schedule if isinstance(stored_schedule, dict) else {}
        nodes = plan.get("nodes")
        if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
            nodes = None
        rounds = self._store.rounds_frame(run_id)
        measured = rounds[rounds["warmup"] == 0] if not rounds.empty else rounds
        counts = []
        if not measured.empty:
            for key, accepted in measured.groupby(["arm", "size"], sort=False)["accepted"]:
                arm, size = key
                counts.append(
                    {
                        "arm": str(arm),
                        "size": int(cast(int, size)),
                        "rounds": len(accepted),
                        "accepted": int(accepted.sum()),
                    }
                )
        blocks = {int(b) for b in measured["block"].dropna()} if not measured.empty else set()
        report_dir = reports / run_id
        return RunDetail(
            id=row["id"],
            kind=row["kind"],
            status=row["status"],
            stop_reason=row["stop_reason"],
            created_at=row["created_at"],
            finished_at=row["finished_at"],
            node=row["node_name"],
            nodes=nodes or ([row["node_name"]] if row["node_name"] else []),
            profile=row["profile_name"],
            playbook=row["playbook_name"],
            design=row["design"],
            seed=_clean(row["seed"]),
            command=row["command"],
            arms=[
                {
                    "name": a["name"],
                    "on": _stored_json(a["on_json"], []),
                    "settings": _stored_json(a["settings_json"], {}),
                    "status": a["status"],
                    "failure": a["failure"],
                }
                for a in records(self._store.arms_frame(run_id))
            ],
            sizes=sorted({int(s) for s in rounds["size"]}) if not rounds.empty else [],
            blocks_planned=_clean(schedule.get("blocks")),
            blocks_with_rounds=len(blocks),
            rounds=counts,
            report={
                "directory": str(report_dir),
                "files": sorted(p.name for p in report_dir.iterdir())
                if report_dir.is_dir()
                else [],
                "render": f"abtest report {run_id} --format html",
            },
        )

    def comparisons(
        self, run_id: str, *, baseline: str | None = None, confidence: float = 0.95
    ) -> list[Comparison]:
        """Each arm vs the baseline per size and metric, as ``abtest report`` shows them."""
        from abtest.analysis.report_model import model_of
        from abtest.analysis.run_data import run_data
        from abtest.stats.intervals import check_confidence
        from abtest.store.run_frames import read_run

        check_confidence(confidence)
        data = run_data(read_run(self._store, run_id))
        model = model_of(data, baseline=baseline, confidence=confidence)
        return list(model.comparisons)

    def regress(
        self,
        reference_run: str,
        candidate_run: str,
        *,
        margin_pct: float = 5.0,
        metrics: tuple[str, ...] = ("batch_ready_s",),
        confidence: float = 0.95,
    ) -> RegressResult:
        """The regression verdict of two stored runs on one node (``abtest regress
        --reference-run --candidate-run``): unpaired, since blocks of two runs do not pair."""
        from abtest.engine.regress_rounds import regress_from_frame, rounds_of_two_runs

        frame = rounds_of_two_runs(self._store, reference_run, candidate_run)
        return regress_from_frame(
            frame,
            reference="reference",
            candidate="candidate",
            sizes=None,
            metrics=list(metrics),
            margin_pct=margin_pct,
            confidence=confidence,
            source=f"runs {reference_run} (reference) vs {candidate_run} (candidate)",
        )

    # the name before "regress" meant the regression gate in new code; kept for scripts
    gate = regress

    def snapshot(self) -> AbstractContextManager[None]:
        """Reads inside see one committed state of the database (a shared database may be
        written by other controllers meanwhile)."""
        return self._store.snapshot()

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Results:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_results(path: str | Path | None = None) -> Results:
    """The results database at ``path`` (default: ``$ABTEST_DB``, else the per-user one): a
    SQLite file or a ``postgresql://`` URL. UserError if there is no such file: a sweep or
    ``abtest batch`` creates it."""
    chosen = resolve(path)
    if isinstance(chosen, str):
        return Results(Store(chosen))
    if not chosen.is_file():
        raise UserError(
            "no results database here",
            str(chosen),
            "give the path of one (abtest runs --db PATH lists its runs), or set ABTEST_DB",
        )
    return Results(Store(chosen))
