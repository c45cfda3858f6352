"""`abtest gates --until-resolved`: the flags checked, the looks run with the sweep display,
one line saying how many looks were taken and at what corrected level."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from abtest.cli.render import err_console
from abtest.cli.sweep_progress import SweepDisplay
from abtest.errors import UserError
from abtest.experiment.plan import SweepPlan, parse_percent
from abtest.experiment.sweep import SweepOptions, SweepResult
from abtest.experiment.until_resolved import (
    ResolveOptions,
    planned_looks,
    run_until_resolved,
    with_blocks,
)
from abtest.store.db import Store


def resolve_options(
    until_resolved: bool,
    resume: str | None,
    plan: SweepPlan,
    max_rounds: int | None,
    precision: str | None,
) -> ResolveOptions | None:
    """The until-resolved options, or None for an ordinary sweep (UserError on misuse)."""
    if not until_resolved:
        for flag, value in (("--max-rounds", max_rounds), ("--precision", precision)):
            if value is not None:
                raise UserError(f"{flag} only applies with --until-resolved", flag)
        return None
    if resume:
        raise UserError(
            "--until-resolved cannot be combined with --resume",
            "--resume",
            "resume the run as a plain sweep (it completes every planned block), or start anew",
        )
    first = plan.playbook.rounds
    opts = ResolveOptions(
        max_rounds=max_rounds if max_rounds is not None else 3 * first,
        precision_pct=parse_percent(precision, "--precision") if precision else None,
    )
    planned_looks(plan, opts)  # checks --rounds/--max-rounds/--precision before any node work
    return opts


def sweep_until_resolved(
    plan: SweepPlan,
    store: Store,
    sweep_opts: SweepOptions,
    opts: ResolveOptions,
    json_out: bool,
    run_id_file: Path | None,
) -> tuple[SweepResult, dict[str, Any]]:
    """Run the looks under one display; the last look's result with the whole wall time."""
    looks = planned_looks(plan, opts)
    display = SweepDisplay(with_blocks(plan, looks[-1]), json_out=json_out, run_id_file=run_id_file)
    t0 = time.monotonic()

    def event(kind: str, data: dict[str, Any]) -> None:
        if kind == "look":
            err_console.print(
                f"look {data['look']}/{len(data['looks'])}: up to {data['blocks']} blocks "
                f"(intervals at {data['level'] * 100:.4g}%)",
                highlight=False,
            )
        elif kind == "look_done":
            state = "all resolved" if data["resolved"] else f"open: {', '.join(data['open'])}"
            err_console.print(f"look {data['look']} ({data['blocks']} blocks): {state}")
        else:
            display.event(kind, data)

    with display:
        done = run_until_resolved(plan, store, sweep_opts, event, opts)
    seq = done.sequential
    summary = (
        f"until resolved: {seq.looks_taken} of {len(seq.looks)} looks "
        f"(planned at {', '.join(map(str, seq.looks))} blocks), {seq.blocks} blocks; "
        f"{'every comparison resolved' if seq.resolved else 'still open: ' + ', '.join(done.open)}"
        f"; intervals at {seq.look_confidence * 100:.4g}% ({seq.confidence:.0%} over "
        f"{len(seq.looks)} looks, "
        "Bonferroni)"
    )
    info: dict[str, Any] = {**seq.to_json(), "open": list(done.open), "summary": summary}
    return replace(done.sweep, wall_s=time.monotonic() - t0), info
