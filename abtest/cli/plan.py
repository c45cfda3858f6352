"""`abtest plan`: what a sweep would do — arms, block schedule, restarts, duration — and what
it can detect: the minimum detectable effect at the planned blocks and, with --detect, the
blocks a target change needs (noise from the node's earlier runs, else a stated default)."""

from __future__ import annotations

from typing import Annotated

import typer

from abtest.cli import options as o
from abtest.cli.render import console, print_json, print_table
from abtest.domain import Arm, show_scalar
from abtest.experiment.design import design_description
from abtest.experiment.history import node_history, noise_history
from abtest.experiment.plan import (
    PowerRow,
    build_plan,
    node_estimates,
    parse_percent,
    power_plan,
    restart_count,
)
from abtest.store.db import Store


def plan(
    names: Annotated[list[str] | None, typer.Argument(help="Limit to these factors.")] = None,
    playbook: o.Playbook = "lab-sweep",
    profile: o.Profiles = None,
    catalog: o.Catalog = None,
    design: o.Design = None,
    attribution: o.Attribution = False,
    rounds: o.Rounds = None,
    sizes: o.Sizes = None,
    seed: o.Seed = None,
    qps: o.Qps = None,
    concurrency: o.Concurrency = None,
    namespace: o.Namespace = None,
    db: o.Db = None,
    json_out: o.Json = False,
    detect: Annotated[
        str | None,
        typer.Option(
            "--detect", help="A change to plan for, e.g. 5%: the blocks it needs (80 % power)."
        ),
    ] = None,
    confidence: Annotated[
        float,
        typer.Option(
            "--confidence", help="The report's two-sided interval level the power is for."
        ),
    ] = 0.95,
) -> None:
    """Print the arms, the block schedule, kubelet restarts, an estimated duration and the
    smallest change each comparison can detect. Nothing is touched."""
    opts = o.plan_options(
        playbook=playbook,
        profile=profile,
        catalog=catalog,
        names=names,
        design=design,
        attribution=attribution,
        rounds=rounds,
        sizes=sizes,
        seed=seed,
        qps=qps,
        concurrency=concurrency,
        namespace=namespace,
    )
    p = build_plan(opts)
    detect_pct = parse_percent(detect, "--detect") if detect is not None else None
    histories = {}
    rounds_before = None
    if db is not None or Store.exists():
        with Store(db) as store:
            for prof in p.profiles:
                histories[prof.node_name] = node_history(store, prof.node_name, p.schedule.sizes)
            rounds_before = noise_history(store, p.profiles[0].node_name, p.schedule.sizes)
    # every node runs the same schedule at the same time: the wall time is the slowest node's
    per_node = node_estimates(p, histories)
    p_est = max((e for _, e in per_node), key=lambda e: e.seconds)
    power = power_plan(p, rounds_before, confidence=confidence, detect_pct=detect_pct)
    if json_out:
        data = p.to_dict()
        data["power"] = [_power_json(r, confidence) for r in power]
        data["design_note"] = design_description(p.design, len(p.factors))
        data["estimate"] = {
            "seconds": round(p_est.seconds, 1),
            "restart_s": p_est.restart_s,
            "cleanup_s": p_est.cleanup_s,
            "batch_s_by_size": p_est.batch_s_by_size,
            "source": p_est.source,
        }
        data["per_node"] = [
            {
                "node": node,
                "visits": len(p.schedule.visits),
                "kubelet_restarts": restart_count(p),
                "measured_rounds": p.schedule.measured_rounds,
                "seconds": round(e.seconds, 1),
                "source": e.source,
            }
            for node, e in per_node
        ]
        print_json(data)
        return
    print_table(
        f"arms ({p.design}, catalog {p.catalog.name})",
        ["arm", "settings"],
        [(a.name, _arm_settings(a)) for a in p.arms],
    )
    if note := design_description(p.design, len(p.factors)):
        console.print(note)
    rows = []
    for v in p.schedule.visits:
        warm = " (+warm-up)" if v.warmup else ""
        rows.append((v.block + 1, v.position + 1, v.arm, ", ".join(map(str, v.sizes)) + warm))
    fleet = len(p.profiles) > 1
    title = f"schedule (seed {p.schedule.seed})"
    if fleet:
        title += f": the same schedule on each of {len(p.profiles)} nodes, concurrently"
    print_table(title, ["block", "visit", "arm", "sizes"], rows)
    minutes = p_est.seconds / 60
    nodes = ", ".join(x.node_name for x in p.profiles)
    if fleet:
        print_table(
            "per node",
            ["node", "visits", "kubelet restarts", "measured rounds", "estimated min", "from"],
            [
                (node, len(p.schedule.visits), restart_count(p), p.schedule.measured_rounds,
                 f"{e.seconds / 60:.0f}", e.source)
                for node, e in per_node
            ],
        )  # fmt: skip
    console.print(
        f"{len(p.schedule.visits)} visits, {restart_count(p)} kubelet restarts"
        + (
            " (a visit whose kubelet settings equal the visit's before it needs none), "
            if restart_count(p) < len(p.schedule.visits)
            else ", "
        )
        + f"{p.schedule.measured_rounds} measured rounds on {nodes}"
        + (" (each)" if fleet else "")
        + f"; estimated {minutes:.0f} min ({p_est.source})"
        + ("; wall time one node's: the nodes run at the same time" if fleet else "")
    )
    _print_power(power, confidence)


def _arm_settings(arm: Arm) -> str:
    """The kubelet settings, then the pod part (``pod.runtimeClassName=crun``)."""
    parts = [f"{k}={show_scalar(v)}" for k, v in arm.settings]
    parts += [f"{k}={v}" for k, v in arm.pod_dict().items()]
    return ", ".join(parts)


def _power_json(r: PowerRow, confidence: float) -> dict[str, object]:
    return {
        "metric": r.metric,
        "size": r.size,
        "blocks": r.blocks,
        "confidence": confidence,
        "power": 0.8,
        "mde_pct": round(r.mde_pct, 2),
        "detect_pct": r.detect_pct,
        "blocks_needed": r.blocks_needed,
        "sd_log_diff": round(r.noise.sd_log_diff, 5),
        "noise_df": r.noise.df,
        "noise_source": r.noise.source,
    }


def _print_power(rows: list[PowerRow], confidence: float) -> None:
    level = f"{confidence * 100:g}"
    asked = rows[0].detect_pct if rows else None
    columns = ["metric", "pods", "log SD", "from", f"MDE, {rows[0].blocks} blocks"]
    if asked is not None:
        columns.append(f"blocks for {asked:g} %")
    table = []
    for r in rows:
        source = f"{r.noise.n_rounds} rounds" if r.noise.from_history else "default"
        row = [r.metric, str(r.size), f"{r.noise.sd_log_diff:.4f}", source, f"{r.mde_pct:.1f} %"]
        if asked is not None:
            row.append(str(r.blocks_needed) if r.blocks_needed else "> 10000")
        table.append(row)
    print_table("what each comparison vs baseline can detect", columns, table)
    console.print(
        f"MDE: the smallest change (either way) each arm-vs-baseline comparison detects with "
        f"80 % power, i.e. its {level} % interval excludes 0 in 80 % of runs (paired t on "
        "per-block log ratios, power from the noncentral t; Holm across arms not included)."
    )
    for source in dict.fromkeys(r.noise.source for r in rows if r.noise.from_history):
        console.print(
            f"noise: paired log SD per metric and size from {source.removeprefix('history: ')}"
        )
    if any(not r.noise.from_history for r in rows):
        console.print(
            "[yellow]no usable history for some sizes: their noise is the stated default "
            "(paired log SD 0.10); a sweep on this node replaces it[/yellow]"
        )
