"""`abtest gates`' use-case: a sweep of a catalog's factors (new, resumed, or adding blocks
until resolved) and its closing summary, as one typed :class:`GatesResult`.

Progress goes to ``emit``: first ``("plan", {"plan": SweepPlan})`` with the plan as it will
run (the most blocks it may take), then the sweep's own events and, until resolved, the looks.
A program calls :func:`sweep_gates` exactly as the command does."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from abtest.app.profiles import with_kube
from abtest.app.reach import Reach
from abtest.config.plan_options import PlanOptions
from abtest.engine.sweep import Event, SweepOptions, SweepResult, run_sweep
from abtest.engine.sweep_nodes import NodeKit
from abtest.engine.sweep_plan import SweepPlan, build_plan, options_from_json, parse_percent
from abtest.engine.sweep_run import resume_plan_check
from abtest.engine.until_resolved import (
    ResolveOptions,
    planned_looks,
    run_until_resolved,
    with_blocks,
)
from abtest.errors import UserError
from abtest.store.db import Store


@dataclass(frozen=True)
class GatesRequest:
    """A new sweep (``plan``), or the stored run ``resume`` continued with its own plan."""

    plan: PlanOptions | None = None
    resume: str | None = None
    fail_fast: bool = False
    break_lock: bool = False
    command: str | None = None  # the command line, kept with the run
    until_resolved: bool = False
    max_rounds: int | None = None  # with until_resolved: the most blocks
    precision: str | None = None  # with until_resolved: e.g. "10%"
    reach: Reach = field(default_factory=Reach)


@dataclass(frozen=True)
class GatesResult:
    sweep: SweepResult
    means: tuple[Any, ...]  # abtest.stats.means.ArmMean per size and arm
    until_resolved: dict[str, Any] | None = None  # the looks, when it ran until resolved

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.sweep.run_id,
            "status": self.sweep.status,
            "nodes": [asdict(n) for n in self.sweep.nodes],
            "wall_s": self.sweep.wall_s,
            "summary": [m.to_dict() for m in self.means],
            **({"until_resolved": self.until_resolved} if self.until_resolved else {}),
        }


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


def sweep_gates(req: GatesRequest, emit: Event, kit: NodeKit | None = None) -> GatesResult:
    """Plan (or reload the stored plan), check everything that needs no node, sweep, and
    summarise each arm's mean batch ready time per size. ``kit``: the nodes and the API
    server (the real ones by default; a test passes fakes)."""
    # A new plan is built (and a bad request refused) before the database is opened or made.
    if req.resume:
        new = None
    elif req.plan is None:
        raise UserError("nothing to sweep", "abtest gates", "give --all, --list or NAME...")
    else:
        new = build_plan(req.plan)
    reach = req.reach
    with Store(reach.db) as store:
        if new is not None:
            plan = new
        else:
            stored = store.runs.plan(req.resume or "")
            plan = build_plan(options_from_json(stored.get("options", {})))
        if reach.kubeconfig or reach.context:
            nodes = tuple(with_kube(p, reach.kubeconfig, reach.context) for p in plan.profiles)
            plan = replace(plan, profiles=nodes)
        sweep_opts = SweepOptions(
            fail_fast=req.fail_fast,
            accept_new_host_key=reach.accept_new_host_key,
            break_lock=req.break_lock,
            command=req.command,
        )
        resolving = resolve_options(
            req.until_resolved, req.resume, plan, req.max_rounds, req.precision
        )
        if req.resume:
            plan = resume_plan_check(store, req.resume, plan)
        looks_info: dict[str, Any] | None = None
        if resolving is None:
            emit("plan", {"plan": plan})
            result = run_sweep(plan, store, sweep_opts, emit, resume_run_id=req.resume, kit=kit)
        else:
            emit("plan", {"plan": with_blocks(plan, planned_looks(plan, resolving)[-1])})
            result, looks_info = _until_resolved(plan, store, sweep_opts, resolving, emit, kit)
        rounds = store.rounds_frame(result.run_id)
    # Imported here: the statistics (pandas, scipy) are only needed once the sweep has ended.
    from abtest.stats.means import arm_means

    return GatesResult(result, tuple(arm_means(rounds)), looks_info)


def _until_resolved(
    plan: SweepPlan,
    store: Store,
    sweep_opts: SweepOptions,
    opts: ResolveOptions,
    emit: Event,
    kit: NodeKit | None,
) -> tuple[SweepResult, dict[str, Any]]:
    """Run the looks; the last look's result with the whole wall time, and the looks taken."""
    t0 = time.monotonic()
    done = run_until_resolved(plan, store, sweep_opts, emit, opts, kit)
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
