"""`abtest report RUN_ID`: render a stored run as Markdown, HTML, CSV and JSON.

Reads the results database only; it never measures anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from abtest.app.report import bisection_of, checked_db, report_model
from abtest.cli import options as o
from abtest.cli.render import console
from abtest.config.paths import check_output_dir, derived_dir
from abtest.errors import UserError
from abtest.report import FORMATS, write_report
from abtest.report.bisect import write_bisect_report
from abtest.report.writer import check_formats


def report(
    run_ids: Annotated[
        list[str],
        typer.Argument(
            metavar="RUN_ID...",
            help="A run id (see `abtest runs`); several: pooled as one fleet run (same "
            "playbook, catalog and arms on disjoint nodes).",
        ),
    ],
    format: Annotated[
        list[str] | None,
        typer.Option(
            "--format",
            "-f",
            help=f"{' | '.join(FORMATS)} | junit (one test case per comparison: does the "
            "saving interval exclude 0?); repeat or comma-separate. Default: all but junit.",
        ),
    ] = None,
    out: Annotated[Path | None, o.out_folder("RUN_ID")] = None,
    db: o.Db = None,
    baseline: Annotated[
        str | None,
        typer.Option("--baseline", help="Arm to compare with. Default: the arm 'baseline'."),
    ] = None,
    confidence: o.Confidence = 0.95,
    pool: Annotated[
        bool,
        typer.Option("--pool", help="Pool the runs into one fleet run (implied by two or more)."),
    ] = False,
) -> None:
    """Render a stored run: tables with intervals, figures, tidy CSV/JSON."""
    asked = [format] if isinstance(format, str) else list(format or FORMATS)
    formats = check_formats([part for item in asked for part in item.split(",") if part.strip()])
    if not formats:
        raise UserError("--format is empty", "--format", f"use {', '.join(FORMATS)}")
    if pool and len(run_ids) < 2:
        raise UserError("--pool needs two or more runs", "--pool", "abtest report RUN1 RUN2 ...")
    checked_db(db, o.DB_FLAG)
    # the default folder is the (pooled) run's id: reports/RUN1+RUN2 for a pool
    # (a run id is a name the database holds: it never leads the folder out of reports/)
    if out is not None:
        out_dir = out
        check_output_dir(out_dir, "--out")
    else:
        out_dir = derived_dir(o.REPORTS, "+".join(run_ids), "--out")
    bisection = bisection_of(db, run_ids)
    if bisection is not None:
        files = write_bisect_report(bisection, out_dir, formats)
        console.print(
            f"report of bisection {bisection.root} written to {out_dir}/", highlight=False
        )
        for file in files:
            console.print(f"  {file}", highlight=False)
        return
    model = report_model(db, run_ids, baseline=baseline, confidence=confidence)
    run_id = model.run_id
    if out is None and out_dir != o.REPORTS / run_id:
        out_dir = derived_dir(o.REPORTS, run_id, "--out")
    written = write_report(model, out_dir, formats)
    console.print(f"report of run {run_id} written to {out_dir}/", highlight=False)
    for file in written:
        if file.parent == out_dir:
            console.print(f"  {file}", highlight=False)
