"""`abtest plan`'s use-case: what a sweep would do (arms, schedule, kubelet restarts, duration
per node) and what it can detect, from the node's earlier runs when the results database has
them. Touches no node. A program calls :func:`plan_sweep` exactly as the command does."""

from __future__ import annotations

from dataclasses import dataclass

from abtest.config.plan_options import PlanOptions
from abtest.engine.design import design_description
from abtest.engine.prior_runs import node_history, noise_history
from abtest.engine.sweep_plan import (
    Estimate,
    PowerRow,
    SweepPlan,
    build_plan,
    node_estimates,
    parse_percent,
    power_plan,
    restart_count,
)
from abtest.store.db import DbTarget, Store

#: The power every planned comparison is sized for.
PLANNED_POWER = 0.8


@dataclass(frozen=True)
class NodeEstimate:
    node: str
    estimate: Estimate


@dataclass(frozen=True)
class PlanReport:
    """The plan, its duration on each node (the slowest decides the wall time: the nodes run
    the same schedule at the same time) and the power table."""

    plan: SweepPlan
    design_note: str  # "" for the simple designs
    per_node: tuple[NodeEstimate, ...]
    power: tuple[PowerRow, ...]
    confidence: float

    @property
    def restarts(self) -> int:
        return restart_count(self.plan)

    @property
    def slowest(self) -> Estimate:
        return max((n.estimate for n in self.per_node), key=lambda e: e.seconds)

    def to_dict(self) -> dict[str, object]:
        p, est = self.plan, self.slowest
        data = p.to_dict()
        data["power"] = [self._power_dict(r) for r in self.power]
        data["design_note"] = self.design_note
        data["estimate"] = {
            "seconds": round(est.seconds, 1),
            "restart_s": est.restart_s,
            "cleanup_s": est.cleanup_s,
            "batch_s_by_size": est.batch_s_by_size,
            "source": est.source,
        }
        data["per_node"] = [
            {
                "node": n.node,
                "visits": len(p.schedule.visits),
                "kubelet_restarts": self.restarts,
                "measured_rounds": p.schedule.measured_rounds,
                "seconds": round(n.estimate.seconds, 1),
                "source": n.estimate.source,
            }
            for n in self.per_node
        ]
        return data

    def _power_dict(self, r: PowerRow) -> dict[str, object]:
        return {
            "metric": r.metric,
            "size": r.size,
            "blocks": r.blocks,
            "confidence": self.confidence,
            "power": PLANNED_POWER,
            "mde_pct": round(r.mde_pct, 2),
            "detect_pct": r.detect_pct,
            "blocks_needed": r.blocks_needed,
            "blocks_cap": r.blocks_cap,
            "power_at_detect": None if r.power_at_detect is None else round(r.power_at_detect, 3),
            # how sure (issue 46): a 90 % interval from the noise's uncertainty, simulated rows
            "power_at_detect_interval": (
                None if r.power_interval is None else [round(x, 3) for x in r.power_interval]
            ),
            "power_model": r.model,
            "simulated": r.simulated,
            "sd_log_diff": round(r.noise.sd_log_diff, 5),
            "noise_df": r.noise.df,
            "noise_source": r.noise.source,
        }


def plan_sweep(
    opts: PlanOptions,
    *,
    db: DbTarget = None,
    confidence: float = 0.95,
    detect: str | None = None,
) -> PlanReport:
    """Build the plan; read the node's history (restart, cleanup and batch times; the
    round-to-round noise) only when a results database exists."""
    plan = build_plan(opts)
    detect_pct = parse_percent(detect, "--detect") if detect is not None else None
    histories: dict[str, dict[str, list[float]]] = {}
    rounds_before = None
    if db is not None or Store.exists():
        with Store(db) as store:
            for prof in plan.profiles:
                histories[prof.node_name] = node_history(store, prof.node_name, plan.schedule.sizes)
            rounds_before = noise_history(store, plan.profiles[0].node_name, plan.schedule.sizes)
    power = power_plan(plan, rounds_before, confidence=confidence, detect_pct=detect_pct)
    return PlanReport(
        plan=plan,
        design_note=design_description(plan.design, len(plan.factors)),
        per_node=tuple(NodeEstimate(n, e) for n, e in node_estimates(plan, histories)),
        power=tuple(power),
        confidence=confidence,
    )
