"""`abtest regress --plan`: before anything runs, how often this gate PASSes an unchanged
candidate and FAILs one slower by twice the margin, its blocks and node time, and, when the cap
cannot reach the target, the cap or margin that would (``abtest.stats.regress_plan``).

Noise comes from the node's earlier runs in the results database (live: the profile's node),
from a pilot (the rounds file given with --csv/--kube-burner/--clusterloader2), or the stated
default; one per (size, metric) decision. With 20 paired rounds of a decision the gate is
simulated from those rounds (``abtest.stats.round_model``), else from a normal model of their
noise. Touches no node."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from abtest.app.regress import RegressRequest
from abtest.config.margin import check_margin
from abtest.config.playbook import load_playbook
from abtest.engine.regress_rounds import look_schedule
from abtest.errors import UserError
from abtest.ingest.rounds import load_rounds
from abtest.stats.intervals import check_confidence
from abtest.stats.plan_interval import RateInterval
from abtest.stats.power import GROUP, Noise, default_noise, noise_from_history
from abtest.stats.regress_plan import (
    LARGEST_CAP,
    NODE_LARGEST_CAP,
    TARGET,
    RegressPlan,
    simulated_plan,
)
from abtest.stats.resolution import grid_step
from abtest.stats.round_model import RoundModel, round_model
from abtest.store.db import Store


@dataclass(frozen=True)
class RegressPlanReport:
    plan: RegressPlan
    noises: tuple[Noise, ...]
    node_seconds_first_look: float | None  # None without a node profile (a pilot file)
    node_seconds_cap: float | None
    coarse: tuple[str, ...] = ()  # "<metric> at <size> pods (1 s grid)" where the data are coarse

    def to_dict(self) -> dict[str, Any]:
        p = self.plan
        return {
            "looks": list(p.looks),
            "margin_pct": p.margin_pct,
            "confidence": p.confidence,
            "target": p.target,
            "pass_if_unchanged": p.pass_if_unchanged,
            "fail_if_twice_margin": p.fail_if_twice_margin,
            "expected_blocks_unchanged": p.expected_blocks_unchanged,
            "reaches_target": p.reaches,
            "cap_that_would": p.cap_that_would,
            "margin_that_would": p.margin_that_would,
            "node_seconds_first_look": self.node_seconds_first_look,
            "node_seconds_cap": self.node_seconds_cap,
            "coarse": list(self.coarse),
            "rates_from": list(p.models),
            "interval": _interval_dict(p.interval),
            "noise": [
                {
                    "metric": n.metric,
                    "size": n.size,
                    "sd_log_diff": n.sd_log_diff,
                    "source": n.source,
                }
                for n in self.noises
            ],
        }


def _interval_dict(sure: RateInterval | None) -> dict[str, Any] | None:
    if sure is None:
        return None
    return {
        "level": sure.level,
        "noise_df": sure.df,
        "pass_if_unchanged": None
        if sure.pass_if_unchanged is None
        else list(sure.pass_if_unchanged),
        "fail_if_twice_margin": (
            None if sure.fail_if_twice_margin is None else list(sure.fail_if_twice_margin)
        ),
        "why_none": sure.why_none,
    }


def describe_interval(sure: RateInterval | None) -> str | None:
    """The plan's line on how sure it is of its rates (issue 46)."""
    if sure is None:
        return None
    if sure.pass_if_unchanged is None or sure.fail_if_twice_margin is None:
        return f"  how sure: no interval for these rates ({sure.why_none})"
    (pa, pb), (fa, fb) = sure.pass_if_unchanged, sure.fail_if_twice_margin
    return (
        f"  how sure: {sure.level:.0%} intervals, from the uncertainty of the noise measured on "
        f"{sure.df} df: PASS {pa:.0%} to {pb:.0%}, FAIL {fa:.0%} to {fb:.0%} (more history "
        "narrows them)"
    )


def plan_regress(
    req: RegressRequest, say: Callable[[str], None] = lambda _: None
) -> RegressPlanReport:
    pb = load_playbook(req.playbook)
    # the gate's own rules (issue 46: --plan took --margin -5, nan and 1000)
    margin = pb.margin_pct if req.margin_pct is None else check_margin(req.margin_pct, "--margin")
    confidence = pb.confidence if req.confidence is None else req.confidence
    check_confidence(confidence)  # before the history is read: one line, nothing else printed
    first, cap = req.first_look or pb.rounds, req.max_rounds or pb.max_rounds
    look_schedule(first, cap)  # the same refusals as the gate
    if cap > LARGEST_CAP:
        # the plan simulates every block of thousands of gates: 10 000 blocks took minutes
        raise UserError(
            f"{cap} blocks: --plan simulates every block up to the cap, and plans caps "
            f"up to {LARGEST_CAP} blocks",
            "--max-rounds",
            f"plan with --max-rounds {LARGEST_CAP} or less; a gate that needs more is "
            "too noisy for its margin (a larger size, a quieter node or a wider margin)",
        )
    metrics = list(req.metrics) or list(pb.metrics)
    sizes = list(req.sizes or pb.sizes)
    history, node_seconds = _history_and_time(req, sizes, first, cap)
    noises = tuple(_noise(history, m, s) for s in sizes for m in metrics)
    whose = "the pilot's" if req.rounds.given else "this node's"
    level = tuple(a for a in (req.reference, "baseline") if a)
    models = tuple(_model(history, n.metric, n.size, whose, level) for n in noises)
    for n, model in zip(noises, models, strict=True):
        how = model.source if model else "normal model"
        say(
            f"noise of {n.metric} at {n.size} pods: paired log SD {n.sd_log_diff:.3f} "
            f"({n.source}); rates from {how}"
        )
    plan = simulated_plan(
        [n.sd_log_diff for n in noises],
        first_look=first,
        cap=cap,
        margin_pct=margin,
        confidence=confidence,
        target=TARGET,
        models=models,
        # the interval's noise: the least measured decision's (a default one has none)
        noise_df=min(n.df for n in noises) if all(n.from_history for n in noises) else 0,
    )
    return RegressPlanReport(plan, noises, *node_seconds, _coarse(history, metrics, sizes))


def _coarse(history: pd.DataFrame | None, metrics: list[str], sizes: list[int]) -> tuple[str, ...]:
    """The (metric, size) whose earlier values lie on a coarse grid (whole seconds...)."""
    if history is None or history.empty:
        return ()
    out = []
    for size in sizes:
        for metric in metrics:
            if metric not in history.columns:
                continue
            values = history.loc[history["size"] == size, metric].dropna().to_numpy(float)
            step = float(grid_step(values)) if values.size > 1 else 0.0
            if step > 0:
                out.append(f"{metric} at {size} pods ({step:g} s grid)")
    return tuple(out)


def _noise(history: pd.DataFrame | None, metric: str, size: int) -> Noise:
    if history is None or history.empty or metric not in history.columns:
        return default_noise(metric, size, "no earlier paired rounds of it")
    return noise_from_history(history, metric=metric, size=size)


def _model(
    history: pd.DataFrame | None, metric: str, size: int, whose: str, level: tuple[str, ...]
) -> RoundModel | None:
    """The node's (or the pilot's) rounds to simulate the gate from, at the level of the first
    of ``level`` a run has (the reference, a sweep's baseline); None: too few of them."""
    if history is None or history.empty or metric not in history.columns:
        return None
    return round_model(history, metric=metric, size=size, whose=whose, level_arms=level)


def _history_and_time(
    req: RegressRequest, sizes: list[int], first: int, cap: int
) -> tuple[pd.DataFrame | None, tuple[float | None, float | None]]:
    if req.rounds.given:  # a pilot: its own rounds are the noise, one group
        frame = load_rounds(req.rounds).frame
        if req.reference and req.candidate:
            frame = frame[frame["arm"].isin([req.reference, req.candidate])]
        if "block" not in frame.columns:
            raise UserError("a pilot needs blocks to plan from", "--plan", "give a block column")
        return frame.assign(**{GROUP: "pilot"}), (None, None)
    if not req.profiles:
        raise UserError(
            "--plan needs the node (--profile) or a pilot (--csv, --kube-burner, --clusterloader2)",
            "--plan",
        )
    # the node and cluster layers only for a live plan, as for a live gate
    from abtest.app.profiles import load_profiles
    from abtest.engine.prior_runs import node_history, noise_history
    from abtest.engine.regress_live import LiveRegressOptions, build_regress_plan
    from abtest.engine.sweep_plan import node_estimates

    nodes = load_profiles(req.profiles, req.reach.kubeconfig, req.reach.context)
    pb = load_playbook(req.playbook)
    live = LiveRegressOptions(
        profile=req.profiles[0], profiles=req.profiles, playbook=pb,
        reference=req.reference or "default", candidate=req.candidate or "default",
        sizes=tuple(sizes), metrics=(), margin_pct=0.0, confidence=0.95, rounds=first,
        max_rounds=cap, seed=pb.seed if req.seed is None else req.seed, nodes=nodes,
    )  # fmt: skip
    with Store(req.reach.db) as store:
        history = pd.concat([noise_history(store, n.node_name, tuple(sizes)) for n in nodes])
        past = {n.node_name: node_history(store, n.node_name, tuple(sizes)) for n in nodes}
    seconds = []
    for blocks in (first, cap):
        estimates = node_estimates(build_regress_plan(live, blocks), past)
        seconds.append(max(e.seconds for _, e in estimates))
    return history, (seconds[0], seconds[1])


def describe_plan(r: RegressPlanReport) -> str:
    p = r.plan
    looks = "/".join(map(str, p.looks))
    lines = [
        f"plan: looks at {looks} blocks, margin {p.margin_pct:g} %, confidence {p.confidence:g}, "
        f"{len(p.sd_log_diffs)} decision(s)",
        f"  an unchanged candidate PASSes {p.pass_if_unchanged:.0%} of the time "
        f"(on average after {p.expected_blocks_unchanged:.1f} blocks)",
        f"  a candidate {2 * p.margin_pct:g} % slower (as far above the margin as an unchanged "
        f"one is below it) FAILs {p.fail_if_twice_margin:.0%}; at the margin itself a FAIL is "
        f"at most {(1 - p.confidence) / 2:.1%} by design",
    ]
    sure = describe_interval(p.interval)
    if sure is not None:
        lines.append(sure)
    if r.node_seconds_first_look is not None and r.node_seconds_cap is not None:
        lines.append(
            f"  node time: {r.node_seconds_first_look / 60:.0f} min to the first look, "
            f"{r.node_seconds_cap / 60:.0f} min at the cap"
        )
    if p.from_rounds:
        each = "; ".join(
            f"{n.metric} at {n.size} pods: {m}" for n, m in zip(r.noises, p.models, strict=True)
        )
        lines.append(
            f"  rates from the gate's own rule on simulated rounds ({each}; an effect on the "
            "work before the wait to any tick they end on)"
        )
    if r.coarse and (not p.models or "normal model" in p.models):
        lines.append(
            f"  coarse data: {', '.join(r.coarse)}; the normal model's rates assume near-normal "
            "noise and over-promise the FAIL rate on such data (by up to 14 points in the cases "
            "measured, docs/statistics.md); 20 paired rounds of history replace it"
        )
    if not p.reaches:
        fixes = []
        if p.cap_that_would is not None:
            fixes.append(f"--max-rounds {p.cap_that_would}")
        if p.margin_that_would is not None:
            fixes.append(f"--margin {p.margin_that_would:g}")
        largest = NODE_LARGEST_CAP if p.from_rounds else LARGEST_CAP
        would = (
            " or ".join(fixes)
            if fixes
            else f"no cap up to {largest} blocks nor a margin up to 50 %"
        )
        lines.append(
            f"  this cap cannot reach {p.target:.0%} for both: {would} would (or less noise: "
            "a larger size, a quieter node)"
        )
    return "\n".join(lines) + "\n"
