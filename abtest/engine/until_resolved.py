"""`abtest gates --until-resolved`: a sweep that adds blocks in fixed looks until every
comparison is resolved (issue 15 section 4).

The looks are planned before the first block, as the regression gate plans them
(``regress.look_schedule``: ``rounds``, ``2 x rounds``, ... up to ``max_rounds`` blocks); the
schedule is built once for ``max_rounds`` blocks and the sweep engine runs it up to each look's
block count (``run_sweep(upto_block=...)``, resuming the same run). After each look every arm is
compared with the baseline at every size for the resolving metrics, with intervals at the level
corrected for the planned looks (``abtest.stats.sequential``); the sweep stops at the first look
where none is unresolved, or at the cap. The looks taken and the correction are written into the
run's plan_json, where the report finds them and reads its intervals at the same level.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from abtest.engine.regress_rounds import analysable_rounds, look_schedule
from abtest.engine.schedule import build_schedule
from abtest.engine.sweep import SweepOptions, SweepResult, run_sweep
from abtest.engine.sweep_nodes import NodeKit
from abtest.engine.sweep_plan import SweepPlan
from abtest.errors import UserError
from abtest.stats import Comparison, compare
from abtest.stats.sequential import (
    PLAN_KEY,
    SequentialPlan,
    check_precision,
    look_level,
    resolution,
    sequential_plan,
)
from abtest.store.db import Store

Event = Callable[[str, dict[str, Any]], None]
RESOLVING_METRICS: tuple[str, ...] = ("batch_ready_s", "p95_s")


@dataclass(frozen=True)
class ResolveOptions:
    max_rounds: int
    precision_pct: float | None = None
    confidence: float = 0.95
    metrics: tuple[str, ...] = RESOLVING_METRICS


@dataclass(frozen=True)
class ResolvedSweep:
    sweep: SweepResult  # the last look's sweep result (run id, status, nodes)
    sequential: SequentialPlan
    open: tuple[str, ...]  # the comparisons still unresolved when it stopped


def planned_looks(plan: SweepPlan, opts: ResolveOptions) -> list[int]:
    check_precision(opts.precision_pct)
    return look_schedule(plan.playbook.rounds, opts.max_rounds)


def with_blocks(plan: SweepPlan, blocks: int) -> SweepPlan:
    """The same plan with ``blocks`` blocks (same arms, sizes, seed), for the last look."""
    pb = plan.playbook.with_overrides(rounds=blocks)
    schedule = build_schedule(list(plan.arms), pb.sizes, blocks, pb.seed, pb.warmup)
    return replace(
        plan, playbook=pb, schedule=schedule, options=replace(plan.options, rounds=blocks)
    )


def comparisons_at(
    rounds: pd.DataFrame, *, metrics: tuple[str, ...], confidence: float
) -> list[Comparison]:
    """Every arm vs the baseline at every size for ``metrics``, at ``confidence``."""
    out: list[Comparison] = []
    if rounds.empty or not (rounds["arm"] == "baseline").any():
        return out
    for metric in metrics:
        frame = rounds.loc[rounds[metric].notna(), ["arm", "size", "block", metric]]
        if (frame["arm"] == "baseline").any():
            out.extend(compare(frame, baseline="baseline", metric=metric, confidence=confidence))
    return out


def describe(c: Comparison) -> str:
    return f"{c.arm} at {c.size} pods ({c.metric})"


def run_until_resolved(
    plan: SweepPlan,
    store: Store,
    sweep_opts: SweepOptions,
    emit: Event,
    opts: ResolveOptions,
    kit: NodeKit | None = None,
) -> ResolvedSweep:
    """Run ``plan`` look by look until every comparison is resolved or the cap is reached."""
    if not any(a.name == "baseline" for a in plan.arms):
        raise UserError("--until-resolved needs a baseline arm", "--design")
    looks = planned_looks(plan, opts)
    full = with_blocks(plan, looks[-1])
    level = look_level(opts.confidence, len(looks))
    run_id: str | None = None
    for number, blocks in enumerate(looks, start=1):
        emit("look", {"look": number, "looks": looks, "blocks": blocks, "level": level})
        result = run_sweep(
            full, store, sweep_opts, emit, resume_run_id=run_id, upto_block=blocks, kit=kit
        )
        run_id = result.run_id
        comparisons = comparisons_at(
            analysable_rounds(store, run_id), metrics=opts.metrics, confidence=level
        )
        still_open = tuple(
            describe(c) for c in comparisons if resolution(c, opts.precision_pct) == "unresolved"
        )
        done = bool(comparisons) and not still_open
        sequential = sequential_plan(
            looks,
            looks_taken=number,
            blocks=blocks,
            confidence=opts.confidence,
            precision_pct=opts.precision_pct,
            metrics=opts.metrics,
            resolved=done,
        )
        _record(store, run_id, sequential)
        emit(
            "look_done",
            {"look": number, "blocks": blocks, "resolved": done, "open": list(still_open)},
        )
        if done or number == len(looks):
            return ResolvedSweep(result, sequential, still_open)
    raise AssertionError("unreachable: the last look always returns")


def _record(store: Store, run_id: str, sequential: SequentialPlan) -> None:
    """Keep the looks in the run's plan_json (the report reads its level from there)."""
    store.runs.set_plan_entry(run_id, PLAN_KEY, sequential.to_json())
