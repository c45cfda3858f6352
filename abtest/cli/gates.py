"""`abtest gates`: list a catalog's factors, or sweep them on a node."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from abtest.cli import groups as g
from abtest.cli import options as o
from abtest.cli.render import console, print_json, print_table
from abtest.config import numbers as num
from abtest.config.catalog import load_catalog
from abtest.config.locations import redact_argv


@g.SWEEP_INPUTS.into("inputs")
@g.SWEEP_SCHEDULE.into("schedule")
@g.LIVE_RUN.into("live")
def gates(
    names: Annotated[
        list[str] | None, typer.Argument(help="Limit the sweep to these factors.")
    ] = None,
    *,
    list_: Annotated[
        bool, typer.Option("--list", help="List the catalog's factors and exit.")
    ] = False,
    all_: Annotated[
        bool, typer.Option("--all", help="Baseline + each factor alone + combined.")
    ] = False,
    attribution: o.Attribution = False,
    design: o.Design = None,
    inputs: g.SweepInputs,
    schedule: g.SweepSchedule,
    resume: Annotated[
        str | None, typer.Option("--resume", help="Continue this run where it stopped.")
    ] = None,
    fail_fast: Annotated[
        bool, typer.Option("--fail-fast", help="Stop at the first failed arm.")
    ] = False,
    break_lock: o.BreakLock = False,
    run_id_file: Annotated[
        Path | None, typer.Option("--run-id-file", help="Write the run id here.")
    ] = None,
    until_resolved: Annotated[
        bool,
        typer.Option(
            "--until-resolved",
            help="Add blocks in fixed looks (--rounds, 2 x --rounds, ... up to --max-rounds) "
            "until every comparison's interval excludes 0 or is narrower than --precision; "
            "intervals at 95 % corrected for the looks (Bonferroni).",
        ),
    ] = False,
    max_rounds: Annotated[
        int | None,
        o.ranged(
            "--max-rounds", num.MAX_ROUNDS, "With --until-resolved: the most blocks (default 3 x)."
        ),
    ] = None,
    precision: Annotated[
        str | None,
        typer.Option(
            "--precision",
            help="With --until-resolved: an interval narrower than this (percentage points of "
            "reduction, e.g. 10%) counts as resolved.",
        ),
    ] = None,
    live: g.LiveRun,
) -> None:
    """List factors (--list), or measure them on a node: --all, or NAME..."""
    if list_:
        _list(inputs.catalog or "agc", live.json_out)
        return
    # Imported only for a sweep: `gates --list` must start without the node and cluster layers
    # (paramiko, the Kubernetes client, aiohttp) and pandas.
    from abtest.app.gates import GatesRequest, sweep_gates
    from abtest.cli.sweep_progress import SweepDisplay, summary_table

    if run_id_file is not None:  # before the node is touched, not after the run started
        o.check_output_file(run_id_file, "--run-id-file")
    chosen = all_ or names or design or attribution
    request = GatesRequest(
        plan=g.plan_options(names, design, attribution, inputs, schedule)
        if chosen and not resume
        else None,
        resume=resume,
        fail_fast=fail_fast,
        break_lock=break_lock,
        command=shlex.join(["abtest", *redact_argv(sys.argv[1:])]),  # no --db password
        until_resolved=until_resolved,
        max_rounds=max_rounds,
        precision=precision,
        reach=live.reach(),
    )
    with SweepDisplay(json_out=live.json_out, run_id_file=run_id_file) as display:
        done = sweep_gates(request, display.event)
    if live.json_out:
        print_json(done.to_dict())
        return
    result = done.sweep
    print_table(f"run {result.run_id}: mean batch ready time (s)", *summary_table(done.means))
    console.print(f"status: {result.status}; wall time {result.wall_s / 60:.1f} min")
    if done.until_resolved:
        console.print(done.until_resolved["summary"], highlight=False)
    console.print(f"full report: abtest report {result.run_id} --format html")
    for node in result.nodes:
        for arm, why in node.failed_arms.items():
            console.print(f"arm {arm} failed on {node.node_name}: {why}", style="yellow")


def _list(catalog_name: str, json_out: bool) -> None:
    cat = load_catalog(catalog_name)
    if json_out:
        print_json([f.to_json() for f in cat.factors])
        return
    print_table(
        f"catalog {cat.name} ({cat.source})",
        ["name", "kind", "on", "off", "summary"],
        [(f.name, f.kind, f.show(True), f.show(False), f.summary) for f in cat.factors],
    )
