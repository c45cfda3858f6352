"""`abtest plan`: what a sweep would do — arms, block schedule, restarts, duration — and what
it can detect: the minimum detectable effect at the planned blocks and, with --detect, the
blocks a target change needs: simulated from the node's earlier rounds when it has enough,
else a normal model with their noise or a stated default."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from abtest.app.plan import PlanReport, plan_sweep
from abtest.cli import groups as g
from abtest.cli import options as o
from abtest.cli.render import console, print_json, print_table
from abtest.config.domain import Arm, show_scalar

if TYPE_CHECKING:  # a type in a signature; the CLI calls no engine
    from abtest.engine.sweep_plan import PowerRow


@g.SWEEP_INPUTS.into("inputs")
@g.SWEEP_SCHEDULE.into("schedule")
def plan(
    names: Annotated[list[str] | None, typer.Argument(help="Limit to these factors.")] = None,
    *,
    inputs: g.SweepInputs,
    design: o.Design = None,
    attribution: o.Attribution = False,
    schedule: g.SweepSchedule,
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
    report = plan_sweep(
        g.plan_options(names, design, attribution, inputs, schedule),
        db=db,
        confidence=confidence,
        detect=detect,
    )
    if json_out:
        print_json(report.to_dict())
        return
    _print_plan(report)
    _print_power(list(report.power), confidence)


def _print_plan(report: PlanReport) -> None:
    p = report.plan
    print_table(
        f"arms ({p.design}, catalog {p.catalog.name})",
        ["arm", "settings"],
        [(a.name, _arm_settings(a)) for a in p.arms],
    )
    if report.design_note:
        console.print(report.design_note)
    rows = []
    for v in p.schedule.visits:
        warm = " (+warm-up)" if v.warmup else ""
        rows.append((v.block + 1, v.position + 1, v.arm, ", ".join(map(str, v.sizes)) + warm))
    fleet = len(p.profiles) > 1
    title = f"schedule (seed {p.schedule.seed})"
    if fleet:
        title += f": the same schedule on each of {len(p.profiles)} nodes, concurrently"
    print_table(title, ["block", "visit", "arm", "sizes"], rows)
    restarts = report.restarts
    if fleet:
        print_table(
            "per node",
            ["node", "visits", "kubelet restarts", "measured rounds", "estimated min", "from"],
            [
                (n.node, len(p.schedule.visits), restarts, p.schedule.measured_rounds,
                 f"{n.estimate.seconds / 60:.0f}", n.estimate.source)
                for n in report.per_node
            ],
        )  # fmt: skip
    est = report.slowest
    nodes = ", ".join(x.node_name for x in p.profiles)
    console.print(
        f"{len(p.schedule.visits)} visits, {restarts} kubelet restarts"
        + (
            " (a visit whose kubelet settings equal the visit's before it needs none), "
            if restarts < len(p.schedule.visits)
            else ", "
        )
        + f"{p.schedule.measured_rounds} measured rounds on {nodes}"
        + (" (each)" if fleet else "")
        + f"; estimated {est.seconds / 60:.0f} min ({est.source})"
        + ("; wall time one node's: the nodes run at the same time" if fleet else "")
    )


def _arm_settings(arm: Arm) -> str:
    """The kubelet build and settings, then the pod part (``pod.runtimeClassName=crun``)."""
    parts = [f"kubelet.binary={arm.kubelet_binary}"] if arm.kubelet_binary else []
    parts += [f"{k}={show_scalar(v)}" for k, v in arm.settings]
    parts += [f"{k}={show_scalar(v)}" for k, v in arm.pod]
    return ", ".join(parts)


def _print_power(rows: list[PowerRow], confidence: float) -> None:
    level = f"{confidence * 100:g}"
    asked = rows[0].detect_pct if rows else None
    columns = ["metric", "pods", "log SD", "power from", f"MDE, {rows[0].blocks} blocks"]
    if asked is not None:
        columns += [f"power for {asked:g} %", f"blocks for {asked:g} %"]
    table = []
    for r in rows:
        mde = f"{r.mde_pct:.1f} %" if r.mde_pct != float("inf") else f"> {r.mde_cap:g} %"
        row = [r.metric, str(r.size), f"{r.noise.sd_log_diff:.4f}", r.model, mde]
        if asked is not None:
            row.append(_power_cell(r))
            row.append(str(r.blocks_needed) if r.blocks_needed else f"> {r.blocks_cap}")
        table.append(row)
    print_table("what each comparison vs baseline can detect", columns, table)
    console.print(
        f"MDE: the smallest change (either way) each arm-vs-baseline comparison detects with "
        f"80 % power, i.e. its {level} % interval excludes 0 in 80 % of runs; Holm across arms "
        "not included."
    )
    if any(r.power_interval is not None for r in rows):
        console.print(
            "power for the change asked: in brackets its 90 % interval from the uncertainty of "
            "the noise the node's rounds measured (none on rounds that end on ticks, where the "
            "noise does not decide it)"
        )
    if any(r.simulated for r in rows):
        console.print(
            "from this node's rounds: 1000 experiments simulated from its earlier rounds (the "
            "effect on the work before any 1 s tick the rounds end on) and counted through the "
            "report's own interval, as the lab's whole-second data need"
        )
    if any(not r.simulated for r in rows):
        console.print(
            "normal model: paired t on per-block log ratios, power from the noncentral t; it "
            "over-promises on whole-second or relist-shaped rounds (docs/statistics.md); a "
            "history of 20 paired rounds at a size replaces it"
        )
    for source in dict.fromkeys(r.noise.source for r in rows if r.noise.from_history):
        console.print(
            f"noise: paired log SD per metric and size from {source.removeprefix('history: ')}"
        )
    if any(not r.noise.from_history for r in rows):
        console.print(
            "no usable history for some sizes: their noise is the stated default "
            "(paired log SD 0.10); a sweep on this node replaces it",
            style="yellow",
        )


def _power_cell(r: PowerRow) -> str:
    """``62%``, with its interval where the plan has one: ``62% (45-78%)``."""
    if r.power_at_detect is None:
        return "-"
    if r.power_interval is None:
        return f"{r.power_at_detect:.0%}"
    lo, hi = r.power_interval
    return f"{r.power_at_detect:.0%} ({lo * 100:.0f}-{hi:.0%})"
