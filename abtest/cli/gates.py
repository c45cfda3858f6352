"""`abtest gates`: list a catalog's factors, or sweep them on a node."""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import asdict, replace
from pathlib import Path

import typer

from abtest.catalog import load_catalog
from abtest.cli import options as o
from abtest.cli.render import console, print_json, print_table
from abtest.errors import UserError
from abtest.experiment.plan import build_plan, options_from_json


def gates(
    names: list[str] = typer.Argument(None, help="Limit the sweep to these factors."),
    list_: bool = typer.Option(False, "--list", help="List the catalog's factors and exit."),
    all_: bool = typer.Option(False, "--all", help="Baseline + each factor alone + combined."),
    attribution: bool = typer.Option(
        False, "--attribution", help="Also all-on-minus-one arms (per-gate attribution)."
    ),
    design: str = o.DESIGN,
    playbook: str = o.PLAYBOOK,
    profile: list[str] = o.PROFILE,
    catalog: str = o.CATALOG,
    rounds: int = o.ROUNDS,
    sizes: str = o.SIZES,
    seed: int = o.SEED,
    qps: float = o.QPS,
    concurrency: int = o.CONCURRENCY,
    namespace: str = o.NAMESPACE,
    resume: str = typer.Option(None, "--resume", help="Continue this run where it stopped."),
    fail_fast: bool = typer.Option(False, "--fail-fast", help="Stop at the first failed arm."),
    accept_new_host_key: bool = typer.Option(False, "--accept-new-host-key"),
    break_lock: bool = typer.Option(False, "--break-lock", help="Take over a stale node lock."),
    run_id_file: Path = typer.Option(None, "--run-id-file", help="Write the run id here."),
    until_resolved: bool = typer.Option(
        False,
        "--until-resolved",
        help="Add blocks in fixed looks (--rounds, 2 x --rounds, ... up to --max-rounds) until "
        "every comparison's interval excludes 0 or is narrower than --precision; intervals at "
        "95 % corrected for the looks (Bonferroni).",
    ),
    max_rounds: int = typer.Option(
        None, "--max-rounds", min=2, help="With --until-resolved: the most blocks (default 3 x)."
    ),
    precision: str = typer.Option(
        None,
        "--precision",
        help="With --until-resolved: an interval narrower than this (percentage points of "
        "reduction, e.g. 10%) counts as resolved.",
    ),
    kubeconfig: str | None = o.KUBECONFIG,
    context: str | None = o.CONTEXT,
    db: Path = o.DB,
    json_out: bool = o.JSON,
) -> None:
    """List factors (--list), or measure them on a node: --all, or NAME..."""
    if list_:
        _list(catalog or "agc", json_out)
        return
    # Imported only for a sweep: `gates --list` must start without the node and cluster layers
    # (paramiko, the Kubernetes client, aiohttp) and pandas.
    from abtest.cli.sweep_progress import SweepDisplay, summary_rows
    from abtest.cli.until_resolved import resolve_options, sweep_until_resolved
    from abtest.experiment.sweep import SweepOptions, resume_plan_check, run_sweep
    from abtest.store.db import Store

    if resume:
        with Store(db) as store:
            stored = json.loads(store.run_row(resume)["plan_json"] or "{}")
        plan = build_plan(options_from_json(stored.get("options", {})))
    else:
        if not (all_ or names or design or attribution):
            raise UserError("nothing to sweep", "abtest gates", "give --all, --list or NAME...")
        opts = o.plan_options(
            playbook,
            profile,
            catalog,
            names,
            design,
            attribution,
            rounds,
            sizes,
            seed,
            qps,
            concurrency,
            namespace,
        )
        plan = build_plan(opts)
    if kubeconfig or context:
        nodes = tuple(o.with_kube(p, kubeconfig, context) for p in plan.profiles)
        plan = replace(plan, profiles=nodes)
    sweep_opts = SweepOptions(
        fail_fast=fail_fast,
        accept_new_host_key=accept_new_host_key,
        break_lock=break_lock,
        command=shlex.join(["abtest", *sys.argv[1:]]),
    )
    resolving = resolve_options(until_resolved, resume, plan, max_rounds, precision)
    with Store(db) as store:
        if resume:
            resume_plan_check(store, resume, plan)
        if resolving is not None:
            result, looks_line = sweep_until_resolved(
                plan, store, sweep_opts, resolving, json_out, run_id_file
            )
        else:
            looks_line = None
            display = SweepDisplay(plan, json_out=json_out, run_id_file=run_id_file)
            with display:
                result = run_sweep(plan, store, sweep_opts, display.event, resume_run_id=resume)
        rounds_df = store.rounds_frame(result.run_id)
    headers, rows = summary_rows(rounds_df)
    if json_out:
        print_json(
            {
                "run_id": result.run_id,
                "status": result.status,
                "nodes": [asdict(n) for n in result.nodes],
                "wall_s": result.wall_s,
                "summary": [dict(zip(headers, r, strict=True)) for r in rows],
                **({"until_resolved": looks_line} if looks_line else {}),
            }
        )
        return
    print_table(f"run {result.run_id}: mean batch ready time (s)", headers, rows)
    console.print(f"status: {result.status}; wall time {result.wall_s / 60:.1f} min")
    if looks_line:
        console.print(looks_line["summary"], highlight=False)
    console.print(f"full report: abtest report {result.run_id} --format html")
    for node in result.nodes:
        for arm, why in node.failed_arms.items():
            console.print(f"[yellow]arm {arm} failed on {node.node_name}: {why}[/yellow]")


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
