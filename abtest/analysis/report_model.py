"""The report model: everything a report shows, computed by ``abtest.stats`` from one stored run.

``model_of(run_data)`` takes the run's frames (``abtest.analysis.run_data``; a stored run is
read by ``abtest.app.report.build_model``) and calls stats for every number with an interval:
``compare`` per metric (Holm across the arms of each size's table), ``attribution`` per size
when the run has a baseline, several factors and single/combined arms, ``factorial_effects`` for
factorial designs, and ``estimate_contrast`` with one arm for the interval of an arm's mean. The
renderers only format this model. The only arithmetic done here is counting, sums and medians
for the descriptive tables (acceptance, kubelet stages, events per pod, restarts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from abtest.analysis.api_path import api_path_method
from abtest.analysis.descriptive import (
    AcceptanceRow,
    ApiRequestRate,
    EventRate,
    ExcludedRound,
    MechanismRate,
    RestartRow,
    StageDelta,
    acceptance,
    api_request_rates,
    environment,
    event_rates,
    excluded,
    mechanism_rates,
    repeated_warnings,
    restarts,
    stages,
)
from abtest.analysis.fleet import FleetReport, build_fleet
from abtest.analysis.reference import PodSpecFactor, build_time_went, build_two_way
from abtest.analysis.run_data import INCLUDED, ArmInfo, RunData
from abtest.analysis.start_phase import start_phase_method
from abtest.analysis.transport import transport_method
from abtest.errors import UserError
from abtest.stats import (
    Attribution,
    Comparison,
    FactorialEffects,
    attribution,
    compare,
    estimate_contrast,
    factorial_effects,
    uncomparable,
)
from abtest.stats.phases import TimeWent
from abtest.stats.power import POWER, Detectable, achieved
from abtest.stats.sequential import SequentialPlan, sequential_plan_of
from abtest.stats.twoway import TwoWay

PRIMARY_METRICS: tuple[str, ...] = ("batch_ready_s", "p95_s")
METRIC_LABELS: dict[str, str] = {
    "batch_ready_s": "Batch ready time",
    "p50_s": "P50 per-pod latency",
    "p95_s": "P95 per-pod latency",
    "p99_s": "P99 per-pod latency",
}


@dataclass(frozen=True)
class ArmMetric:
    """One arm at one size for one metric: the cell of a per-arm table."""

    arm: str
    size: int
    metric: str
    n: int
    mean: float
    median: float
    ci: tuple[float, float] | None  # for the mean, from stats (None: see note)
    note: str


@dataclass(frozen=True)
class ReportModel:
    run_id: str
    run: dict[str, object]  # the runs row (playbook text included)
    environment: tuple[tuple[str, str], ...]
    method: tuple[str, ...]
    confidence: float
    baseline: str | None
    combined_arm: str | None
    arms: tuple[ArmInfo, ...]
    factors: tuple[str, ...]
    sizes: tuple[int, ...]
    metrics: tuple[str, ...]
    blocks: int
    arm_metrics: tuple[ArmMetric, ...]
    comparisons: tuple[Comparison, ...]
    attributions: tuple[Attribution, ...]
    factorial: tuple[FactorialEffects, ...]
    acceptance: tuple[AcceptanceRow, ...]
    excluded: tuple[ExcludedRound, ...]
    stages: tuple[StageDelta, ...]
    restarts: tuple[RestartRow, ...]
    notes: tuple[str, ...]
    rounds: pd.DataFrame = field(repr=False)  # every round, with ``included``
    pods: pd.DataFrame = field(repr=False)  # every pod, with ``latency_s`` and ``included``
    # what each comparison (same order as ``comparisons``) could detect from its own paired
    # noise with 80 % power; None where it is unpaired or has no interval
    detectable: tuple[Detectable | None, ...] = ()
    # set for a run that stopped when resolved (`gates --until-resolved`): the looks and the
    # corrected level its intervals use
    sequential: SequentialPlan | None = None
    # a run on several nodes: per-node comparisons and the node x arm interaction
    fleet: FleetReport | None = None
    # the reference article's views: the runtime x settings table (one pod-spec factor crossed
    # with kubelet factors) and, per arm vs baseline, where the time went
    two_way: TwoWay | None = None
    pod_factor: PodSpecFactor | None = None
    time_went: tuple[TimeWent, ...] = ()
    # events per pod by reason (median round), per arm and size: the node's repeated warnings
    events: tuple[EventRate, ...] = ()
    # the kubelet's API requests per pod by method and code (median round), per arm and size
    api_requests: tuple[ApiRequestRate, ...] = ()
    mechanisms: tuple[MechanismRate, ...] = ()  # the agc series' counters per pod

    @property
    def pod_latencies(self) -> pd.DataFrame:
        """round_id, arm, size, block, name, latency_s of every pod of the analysed rounds."""
        pods = self.pods
        return pods.loc[
            pods["included"] & pods["latency_s"].notna(),
            ["round_id", "arm", "size", "block", "name", "latency_s"],
        ].reset_index(drop=True)

    def arm_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.arms)

    def arm_metric(self, arm: str, size: int, metric: str) -> ArmMetric | None:
        return next(
            (m for m in self.arm_metrics if (m.arm, m.size, m.metric) == (arm, size, metric)),
            None,
        )

    def comparisons_for(self, metric: str, arm: str | None = None) -> list[Comparison]:
        return [c for c in self.comparisons if c.metric == metric and (arm is None or c.arm == arm)]

    def detectable_for(self, c: Comparison) -> Detectable | None:
        """The minimum detectable effect the run achieved for comparison ``c``."""
        for other, found in zip(self.comparisons, self.detectable, strict=False):
            if other is c:
                return found
        return None


def model_of(data: RunData, *, baseline: str | None, confidence: float) -> ReportModel:
    run_id = str(data.run["id"])
    base = _baseline(data, baseline)
    notes: list[str] = []
    # A run that stopped when resolved looked several times: its intervals are read at the
    # level corrected for its planned looks (Bonferroni), as the stopping rule used them.
    sequential = sequential_plan_of(data.run.get("plan_json"), confidence)
    if sequential is not None:
        confidence = sequential.look_confidence
    metrics = data.metrics()
    if data.rounds.empty:
        notes.append("the run has no rounds yet")
    elif not metrics:
        notes.append("no accepted, non-warm-up round: nothing to analyse")

    comparisons: list[Comparison] = []
    if base is not None:
        for metric in metrics:
            frame = data.stats_frame(metric)
            if not (frame["arm"] == base).any():
                notes.append(f"no analysed {base} round: no comparisons of {metric}")
                continue
            try:
                table = compare(frame, baseline=base, metric=metric, confidence=confidence)
            except UserError as exc:  # e.g. a stored time of 0 s: say so, render the rest
                notes.append(f"no comparisons of {metric}: {exc.one_line()}")
                continue
            comparisons.extend(table)
            for arm, size in uncomparable(frame, baseline=base):
                notes.append(f"{arm} at {size} pods: no analysed {base} round there ({metric})")
    elif metrics:
        notes.append("no baseline arm: per-arm times only, no comparisons")

    combined = _combined_arm(data)
    attributions, factorials = _attribution_and_factorial(
        data, base, metrics, confidence, notes, combined
    )
    two_way_table, pod_factor = build_two_way(data, confidence, notes)
    time_went = build_time_went(data, base, confidence, notes)
    included = data.rounds[data.rounds[INCLUDED]]
    rates = event_rates(data)
    notes.extend(repeated_warnings(rates))
    return ReportModel(
        run_id=run_id,
        run=data.run,
        environment=environment(data),
        method=_method(confidence, sequential)
        + _design_method(data)
        + _build_method(data)
        + _load_method(data)
        + start_phase_method(data)
        + transport_method(data)
        + api_path_method(data),
        confidence=confidence,
        baseline=base,
        combined_arm=combined,
        arms=data.arms,
        factors=data.factors,
        sizes=data.sizes(),
        metrics=metrics,
        blocks=int(included["block_label"].nunique()),
        arm_metrics=_arm_metrics(data, metrics, confidence),
        comparisons=tuple(comparisons),
        attributions=attributions,
        factorial=factorials,
        acceptance=acceptance(data),
        excluded=excluded(data),
        stages=stages(data),
        restarts=restarts(data),
        notes=tuple(dict.fromkeys(notes)),
        rounds=data.rounds,
        pods=data.pods,
        detectable=tuple(achieved(c, POWER) for c in comparisons),
        sequential=sequential,
        fleet=build_fleet(data, base, metrics, confidence),
        two_way=two_way_table,
        pod_factor=pod_factor,
        time_went=time_went,
        events=rates,
        api_requests=api_request_rates(data),
        mechanisms=mechanism_rates(data),
    )


def _baseline(data: RunData, asked: str | None) -> str | None:
    names = [a.name for a in data.arms]
    if asked is not None:
        if asked not in names:
            raise UserError(
                f"no arm {asked!r} in run {data.run['id']}",
                "--baseline",
                f"arms: {', '.join(names) or 'none'}",
            )
        return asked
    if "baseline" in names:
        return "baseline"
    empty = [a.name for a in data.arms if not a.on]
    return empty[0] if len(empty) == 1 and len(names) > 1 else None


def _combined_arm(data: RunData) -> str | None:
    if len(data.factors) < 2:
        return None
    everything = set(data.factors)
    return next((a.name for a in data.arms if set(a.on) == everything), None)


def _attribution_and_factorial(
    data: RunData,
    base: str | None,
    metrics: tuple[str, ...],
    confidence: float,
    notes: list[str],
    combined: str | None,
) -> tuple[tuple[Attribution, ...], tuple[FactorialEffects, ...]]:
    if base is None or len(data.factors) < 2:
        return (), ()
    arm_sets = {a.name: frozenset(a.on) for a in data.arms}
    has_singles = any(len(a.on) == 1 for a in data.arms)
    attributions: list[Attribution] = []
    factorials: list[FactorialEffects] = []
    # a screen is a (resolution III) factorial: the same model, main effects only
    factorial_design = str(data.run.get("design") or "").startswith(("factorial", "screen"))
    for metric in (m for m in PRIMARY_METRICS if m in metrics):
        frame = data.stats_frame(metric)
        for size in data.sizes():
            if not ((frame["arm"] == base) & (frame["size"] == size)).any():
                continue
            if has_singles or combined is not None:
                try:
                    attributions.append(
                        attribution(
                            frame,
                            arms=arm_sets,
                            factors=data.factors,
                            baseline=base,
                            metric=metric,
                            size=size,
                            confidence=confidence,
                        )
                    )
                except UserError as exc:
                    notes.append(f"no attribution at {size} pods ({metric}): {exc.one_line()}")
            if factorial_design:
                try:
                    factorials.append(
                        factorial_effects(
                            frame,
                            arms=arm_sets,
                            factors=data.factors,
                            metric=metric,
                            size=size,
                            confidence=confidence,
                        )
                    )
                except UserError as exc:
                    notes.append(f"no factorial effects at {size} pods: {exc.one_line()}")
    return tuple(attributions), tuple(factorials)


def _arm_metrics(
    data: RunData, metrics: tuple[str, ...], confidence: float
) -> tuple[ArmMetric, ...]:
    out: list[ArmMetric] = []
    for metric in metrics:
        frame = data.stats_frame(metric)
        for arm in data.arms:
            for size in data.sizes():
                values = frame.loc[(frame["arm"] == arm.name) & (frame["size"] == size), metric]
                if values.empty:
                    continue
                mean = estimate_contrast(
                    frame,
                    coefficients={arm.name: 1.0},
                    size=size,
                    metric=metric,
                    confidence=confidence,
                    scale="raw",
                )
                out.append(
                    ArmMetric(
                        arm=arm.name,
                        size=size,
                        metric=metric,
                        n=int(values.size),
                        mean=float(values.mean()),
                        median=float(values.median()),
                        ci=mean.ci,
                        note=mean.note,
                    )
                )
    return tuple(out)


def _design_method(data: RunData) -> tuple[str, ...]:
    """What the run's design can and cannot tell (a screen's aliasing must be read with it)."""
    if str(data.run.get("design") or "") != "screen":
        return ()
    return (
        "Design screen: a resolution III two-level fraction (the baseline among its arms); "
        "the factorial effects are main effects only, each aliased with two-factor "
        "interactions, so a factor's effect may carry part of an interaction of two others. "
        "A screen ranks candidates; confirm its picks with a gates-all or factorial run.",
    )


def _build_method(data: RunData) -> tuple[str, ...]:
    """Which kubelet build each arm ran and, for a patched build, what it was made of (the
    record the pre-flight read from the node: release, series, each patch's sha256)."""
    per_node = data.env.get("kubelet_builds")
    if not isinstance(per_node, dict):
        return ()
    lines = []
    for node, arms in sorted(per_node.items()):
        if not isinstance(arms, dict):
            continue
        builds: dict[str, list[str]] = {}
        for arm, rec in arms.items():
            if isinstance(rec, dict):
                builds.setdefault(_describe_build(rec), []).append(str(arm))
        for text, names in builds.items():
            lines.append(f"Kubelet build on {node} for {', '.join(sorted(names))}: {text}.")
    return tuple(lines)


def _load_method(data: RunData) -> tuple[str, ...]:
    """The node's cores and each size's pods per core: a batch's time on a node with few cores
    is bound by CPU where the same batch on a large node is bound by waits (relist ticks, API
    round trips), so an effect measured at one load per core need not hold at another."""
    envs = data.env.get("nodes")
    per_node = envs if isinstance(envs, dict) and envs else {"": data.env}
    sizes = sorted({int(s) for s in data.rounds["size"]}) if len(data.rounds) else []
    lines = []
    for name, env in sorted(per_node.items()):
        cores = _node_cores(env if isinstance(env, dict) else {})
        if cores is None or not sizes:
            continue
        where = f"{name} has" if name else "the node has"
        loads = ", ".join(f"{size} pods = {size / cores:.3g}" for size in sizes)
        lines.append(f"Load: {where} {cores:g} CPU cores (capacity); pods per core: {loads}.")
    return tuple(lines)


def _node_cores(env: dict[str, Any]) -> float | None:
    """The node's CPU capacity as the sweep's probe records it (nested) or a flat node_cpu."""
    node = env.get("node")
    capacity = node.get("capacity") if isinstance(node, dict) else None
    if isinstance(capacity, dict) and "cpu" in capacity:
        return _cpu_quantity(capacity["cpu"])
    return _cpu_quantity(env.get("node_cpu"))


def _cpu_quantity(value: object) -> float | None:
    """A Kubernetes CPU quantity ("2", "1.5", "2500m") in cores; None when it is not one."""
    text = str(value) if isinstance(value, str | int | float) else ""
    try:
        cores = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        return None
    return cores if cores > 0 else None


def _describe_build(rec: dict[str, Any]) -> str:
    text = f"{rec.get('version', '?')} ({rec.get('path', '?')})"
    source = rec.get("source")
    if not isinstance(source, dict):
        return text
    patches = source.get("patches")
    listed = (
        ", ".join(
            f"{p.get('file')} sha256:{str(p.get('sha256', ''))[:12]}"
            for p in patches
            if isinstance(p, dict)
        )
        if isinstance(patches, list)
        else "?"
    )
    return (
        f"{text}: k8s.io/kubernetes {source.get('release', '?')} + patch series "
        f"{source.get('series', '?')} (digest {str(source.get('digest', ''))[:12]}): {listed}; "
        "this project's implementations of the mechanisms, not a vendor's build"
    )


def _method(confidence: float, sequential: SequentialPlan | None = None) -> tuple[str, ...]:
    level = f"{confidence * 100:.4g}%"
    stopping = (sequential.describe(),) if sequential is not None else ()
    return (
        "Unit: one accepted, non-warm-up round per (arm, size); per-pod latency = create request "
        "sent to first Ready=True seen; batch ready = first request sent to all Ready; "
        "percentiles nearest-rank.",
        f"Percent reduction (B - T) / B x 100 on geometric means (log scale) and savings B - T "
        f"on means, {level} t-intervals paired by block (Welch when blocks do not pair); "
        "p-values test 'no change', Holm-adjusted across the arms vs the baseline at each size "
        "(attribution tables adjust over their own comparisons; each table names its family). "
        f"Could detect: each comparison's sensitivity, the change (either way) it would have "
        f"detected with {POWER:.0%} power at this level, from its own per-block noise (paired t, "
        "power from the noncentral t). It is not a bound on the effect: the interval says what "
        "the data rule out.",
        *stopping,
    )
