"""The options that say where `analyze` and `regress` take rounds from (our tidy CSV,
kube-burner or clusterloader2), declared once so both commands spell and document them the
same way. Reading the rounds is :func:`abtest.ingest.rounds.load_rounds`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from abtest.cli.options import OptionGroup, option, ranged
from abtest.config.numbers import SIZE
from abtest.ingest.rounds import RoundsSource

KubeBurner = Annotated[
    Path | None,
    typer.Option(
        "--kube-burner",
        help="A directory of kube-burner runs (local indexer output); one run = one round.",
    ),
]
Clusterloader2 = Annotated[
    Path | None,
    typer.Option(
        "--clusterloader2",
        help="A directory of clusterloader2 report dirs; one PodStartupLatency file = one round.",
    ),
]
Arm = Annotated[
    list[str] | None,
    typer.Option(
        "--arm",
        help="NAME=GLOB: the run directories (under the data directory) of arm NAME; repeat.",
    ),
]
Job = Annotated[
    str | None, typer.Option("--job", help="kube-burner job whose pods to read (if several).")
]
Block = Annotated[
    str | None,
    typer.Option(
        "--block",
        help="kube-burner jobSummary field that names the block (default: pair runs in time "
        "order).",
    ),
]
Latency = Annotated[
    str | None,
    typer.Option(
        "--latency",
        help="kube-burner per-pod latency the metrics are made of (default podReadyLatency; "
        "containersReadyLatency, schedulingLatency, ...).",
    ),
]
Size = Annotated[
    int | None,
    ranged(
        "--size",
        SIZE,
        "Pods per round: needed for clusterloader2; for kube-burner, keep only such runs.",
    ),
]


# --- rounds another tool measured (analyze, regress) ----------------------------------------


#: The rounds source without its CSV (each command names that its own way): ``replace(tools,
#: csv=path)``; each option is the RoundsSource field of its name.
OTHER_TOOLS = OptionGroup(
    (
        option("kube_burner", KubeBurner, None),
        option("clusterloader2", Clusterloader2, None),
        option("arms", Arm, None),
        option("job", Job, None),
        option("block", Block, None),
        option("size", Size, None),
        option("latency", Latency, None),
    ),
    lambda arms, **same: RoundsSource(arms=tuple(arms or ()), **same),
)
