"""`abtest history --node NODE`: the node's per-run figure across runs and its change points."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from abtest.app.history import HistoryRequest
from abtest.app.history import history as node_history
from abtest.cli import options as o
from abtest.cli.render import console, echo, print_json
from abtest.config.paths import check_output_dir, derived_dir
from abtest.report.history import markdown, to_dict, write
from abtest.stats.changepoints import MAX_PVALUE


def history(
    node: Annotated[
        list[str],
        typer.Option("--node", help="The node (its Kubernetes name); repeat for a pool of nodes."),
    ],
    arm: Annotated[
        str | None, typer.Option("--arm", help="Arm to follow. Default: baseline.")
    ] = None,
    size: Annotated[
        int | None, typer.Option("--size", help="Batch size. Default: the most measured.")
    ] = None,
    metric: Annotated[
        str, typer.Option("--metric", help="batch_ready_s | p50_s | p95_s | p99_s | mean_s.")
    ] = "batch_ready_s",
    fail_on_new: Annotated[
        int | None,
        typer.Option(
            "--fail-on-new",
            metavar="K",
            help="Exit 1 on a confirmed slower change point (its new level held for 3 runs, "
            "its step's interval above 0) that the reports of K runs ago and before did not "
            "show, whichever night it is found.",
        ),
    ] = None,
    alarm_unconfirmed: Annotated[
        bool,
        typer.Option(
            "--alarm-unconfirmed",
            help="With --fail-on-new: also exit 1 on an unconfirmed slower change point (its "
            "new level only the last run or two) in the last K runs.",
        ),
    ] = False,
    max_pvalue: Annotated[
        float,
        typer.Option("--max-pvalue", help="Otava's significance level, strictly between 0 and 1."),
    ] = MAX_PVALUE,
    out: Annotated[Path | None, o.out_folder("history-NODE")] = None,
    json_out: o.Json = False,
    db: o.Db = None,
) -> None:
    """A node's per-run figure across runs, its change points (Apache Otava) with the step and
    what changed; Markdown, HTML with a plot, JSON."""
    if out is not None:  # before the database is read (the default folder is the node's)
        check_output_dir(out, "--out")
    h = node_history(
        HistoryRequest(
            node=tuple(node),
            arm=arm,
            size=size,
            metric=metric,
            fail_on_new=fail_on_new,
            alarm_unconfirmed=alarm_unconfirmed,
            max_pvalue=max_pvalue,
            db=db,
        )
    )
    # a node name given or stored never leads the default folder out of reports/
    out_dir = out if out is not None else derived_dir(o.REPORTS, f"history-{h.node}", "--out")
    written = write(h, out_dir)
    if json_out:
        print_json(to_dict(h))
    else:
        echo(markdown(h), nl=False)  # plain: a pipe gets the Markdown unwrapped
        console.print(f"written: {', '.join(str(p) for p in written)}", highlight=False)
    if h.alarms:
        raise typer.Exit(1)
