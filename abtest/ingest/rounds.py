"""Rounds from exactly one source: our tidy CSV, kube-burner runs or clusterloader2 reports
(what `abtest analyze` and `abtest regress` read when they do not measure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from abtest.errors import UserError
from abtest.ingest import load_foreign
from abtest.ingest.rounds_csv import load_rounds_csv


@dataclass(frozen=True)
class RoundsSource:
    """Where rounds come from, as the command line names it (one of csv, kube_burner,
    clusterloader2; the rest select within another tool's runs)."""

    csv: Path | None = None
    kube_burner: Path | None = None
    clusterloader2: Path | None = None
    arms: tuple[str, ...] = ()  # NAME=GLOB: an arm's run directories
    job: str | None = None
    block: str | None = None
    size: int | None = None
    latency: str | None = None

    @property
    def given(self) -> bool:
        return bool(self.csv or self.kube_burner or self.clusterloader2)


@dataclass
class Rounds:
    """Rounds to analyse, where they came from, and notes to print with the tables."""

    frame: pd.DataFrame
    source: str
    notes: list[str] = field(default_factory=list)


def load_rounds(src: RoundsSource) -> Rounds:
    """The rounds of exactly one source."""
    foreign = load_foreign(
        src.kube_burner,
        src.clusterloader2,
        list(src.arms) or None,
        job=src.job,
        block_field=src.block,
        size=src.size,
        latency=src.latency,
    )
    if foreign is not None:
        if src.csv is not None:
            raise UserError(
                "give a rounds CSV or another tool's directory, not both",
                str(src.csv),
                "drop the CSV or --kube-burner/--clusterloader2",
            )
        return Rounds(foreign.rounds, foreign.source, foreign.notes)
    if src.csv is None:
        raise UserError(
            "no rounds given",
            "abtest analyze",
            "give ROUNDS.csv, --kube-burner DIR --arm NAME=GLOB ..., or --clusterloader2 DIR",
        )
    if src.size is not None:
        raise UserError("--size goes with --kube-burner or --clusterloader2", "--size")
    return Rounds(load_rounds_csv(src.csv), str(src.csv))
