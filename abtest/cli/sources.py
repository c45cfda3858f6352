"""Where `analyze` and `regress` take rounds from: our tidy CSV, kube-burner or clusterloader2.

The options are defined once here so both commands spell and document them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import typer

from abtest.cli.rounds_csv import load_rounds_csv
from abtest.errors import UserError
from abtest.ingest import load_foreign

KUBE_BURNER = typer.Option(
    None,
    "--kube-burner",
    help="A directory of kube-burner runs (local indexer output); one run = one round.",
)
CLUSTERLOADER2 = typer.Option(
    None,
    "--clusterloader2",
    help="A directory of clusterloader2 report dirs; one PodStartupLatency file = one round.",
)
ARM = typer.Option(
    None,
    "--arm",
    help="NAME=GLOB: the run directories (under the data directory) of arm NAME; repeat.",
)
JOB = typer.Option(None, "--job", help="kube-burner job whose pods to read (if several).")
BLOCK = typer.Option(
    None,
    "--block",
    help="kube-burner jobSummary field that names the block (default: pair runs in time order).",
)
LATENCY = typer.Option(
    None,
    "--latency",
    help="kube-burner per-pod latency the metrics are made of (default podReadyLatency; "
    "containersReadyLatency, schedulingLatency, ...).",
)
SIZE = typer.Option(
    None,
    "--size",
    min=1,
    help="Pods per round: needed for clusterloader2; for kube-burner, keep only such runs.",
)


@dataclass
class Rounds:
    """Rounds to analyse, where they came from, and notes to print with the tables."""

    frame: pd.DataFrame
    source: str
    notes: list[str] = field(default_factory=list)


def load_rounds(
    csv_path: Path | None,
    kube_burner: Path | None,
    clusterloader2: Path | None,
    arms: list[str] | None,
    job: str | None,
    block: str | None,
    size: int | None,
    latency: str | None = None,
) -> Rounds:
    """The rounds of exactly one source."""
    foreign = load_foreign(
        kube_burner, clusterloader2, arms, job=job, block_field=block, size=size, latency=latency
    )
    if foreign is not None:
        if csv_path is not None:
            raise UserError(
                "give a rounds CSV or another tool's directory, not both",
                str(csv_path),
                "drop the CSV or --kube-burner/--clusterloader2",
            )
        return Rounds(foreign.rounds, foreign.source, foreign.notes)
    if csv_path is None:
        raise UserError(
            "no rounds given",
            "abtest analyze",
            "give ROUNDS.csv, --kube-burner DIR --arm NAME=GLOB ..., or --clusterloader2 DIR",
        )
    if size is not None:
        raise UserError("--size goes with --kube-burner or --clusterloader2", "--size")
    return Rounds(load_rounds_csv(csv_path), str(csv_path))
