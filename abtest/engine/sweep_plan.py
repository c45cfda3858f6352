"""A sweep's plan: playbook + flags -> factors, arms, block schedule and an estimate.

Pure apart from loading the YAML files it is pointed at; ``abtest plan`` prints it and
touches nothing, ``abtest gates`` runs it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from abtest.config import numbers as num
from abtest.config.build_names import BuildName, parse_build_name
from abtest.config.catalog import load_catalog, select_factors
from abtest.config.domain import Arm, Catalog, Factor, Settings
from abtest.config.plan_options import PlanOptions
from abtest.config.playbook import NodeProfile, Playbook, load_playbook, load_profile
from abtest.engine.design import build_arms, dedupe, gates_all
from abtest.engine.fleet import same_node
from abtest.engine.schedule import Schedule, build_schedule, estimate_seconds
from abtest.errors import UserError

if TYPE_CHECKING:  # numpy/scipy/pandas load only when power is planned (`gates --list` is fast)
    import pandas as pd

    from abtest.stats.power import Noise
    from abtest.stats.round_model import RoundModel

# Used when the results database has nothing measured on this node yet (stated in the plan).
DEFAULT_RESTART_S = 20.0
DEFAULT_CLEANUP_S = 8.0
DEFAULT_SECONDS_PER_POD = 0.25


@dataclass(frozen=True)
class Estimate:
    seconds: float
    restart_s: float
    cleanup_s: float
    batch_s_by_size: dict[int, float]
    source: str  # "measured on <node>" or "defaults"


@dataclass(frozen=True)
class SweepPlan:
    playbook: Playbook
    catalog: Catalog
    factors: tuple[Factor, ...]
    design: str
    arms: tuple[Arm, ...]
    schedule: Schedule
    profiles: tuple[NodeProfile, ...]
    options: PlanOptions = field(default_factory=lambda: PlanOptions())
    estimate: Estimate | None = field(default=None)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "playbook": self.playbook.name,
            "playbook_source": self.playbook.source,
            "catalog": self.catalog.name,
            "design": self.design,
            "factors": [f.name for f in self.factors],
            "nodes": [p.node_name for p in self.profiles],
            "namespace": self.playbook.namespace,
            "generator": {
                "qps": self.playbook.generator.qps,
                "concurrency": self.playbook.generator.concurrency,
                "timeout_s": self.playbook.generator.timeout_s,
                "observe_s": self.playbook.generator.observe_s,
                "start_dither_s": self.playbook.generator.start_dither_s,
            },
            "schedule": self.schedule.to_dict(),
            "kubelet_restarts": sum(kubelet_visits(self.schedule)),
            # what each arm renders into its pods (pod-spec factors), beside its kubelet part
            "arm_pods": {a.name: a.pod_dict() for a in self.arms if a.pod_dict()},
            # what the user asked for, so `gates --resume` rebuilds the identical plan
            "options": {
                k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self.options).items()
            },
        }
        if self.estimate:
            out["estimate"] = {
                "seconds": round(self.estimate.seconds, 1),
                "restart_s": self.estimate.restart_s,
                "cleanup_s": self.estimate.cleanup_s,
                "batch_s_by_size": self.estimate.batch_s_by_size,
                "source": self.estimate.source,
            }
        return out


def arms_for(factors: tuple[Factor, ...], design: str) -> list[Arm]:
    if design == "gates-all":
        return gates_all(factors, attribution=False)
    if design == "attribution":
        return gates_all(factors, attribution=True)
    if design in ("factorial", "screen"):
        return build_arms(factors, design)
    parts = [d.strip() for d in design.split("+")]
    return dedupe([arm for d in parts for arm in build_arms(factors, d)])


def build_plan(opts: PlanOptions) -> SweepPlan:
    pb = load_playbook(opts.playbook).with_overrides(
        rounds=opts.rounds,
        sizes=tuple(opts.sizes) if opts.sizes else None,
        seed=opts.seed,
        namespace=opts.namespace,
        warmup=opts.warmup,
        qps=opts.qps,
        concurrency=opts.concurrency,
    )
    catalog = load_catalog(opts.catalog or pb.catalog)
    names = list(opts.factors or pb.factors)
    factors = select_factors(catalog, names)
    # names given on the command line (arguments), else the playbook's `factors:`
    check_crossing(factors, pb, where="factors" if opts.factors else f"{pb.source}: factors")
    design = opts.design or pb.design
    if opts.attribution and design == "gates-all":
        design = "attribution"
    arms = arms_for(tuple(factors), design)
    if not any(a.name == "baseline" for a in arms):
        raise UserError(
            f"design {design!r} has no baseline arm", "--design", "add the baseline design"
        )
    profile_names = opts.profiles or ((pb.profile,) if pb.profile else ())
    if not profile_names:
        raise UserError("no node profile", "--profile", "give --profile or set profile:")
    # the playbook's own `profile:` is relative to its folder; a --profile to the working folder
    base = Path(pb.source).parent if not opts.profiles else None
    profiles = tuple(load_profile(p, base) for p in profile_names)
    same_node(profiles)  # two profiles for one node: refused here, before any plan is made
    # `--kubelet-build ''` is a build name too (refused), not "no option"
    build = (
        parse_build_name(opts.kubelet_build, "--kubelet-build", paths=False)
        if opts.kubelet_build is not None
        else profile_build(profiles)
    )
    arms = with_build(arms, build)
    check_builds_found(arms, profiles, "--kubelet-build" if opts.kubelet_build else None)
    check_plan_size(len(arms), len(pb.sizes), pb.rounds, pb.source)
    check_pod_renders(pb, profiles)
    schedule = build_schedule(arms, pb.sizes, pb.rounds, pb.seed, pb.warmup)
    return SweepPlan(pb, catalog, tuple(factors), design, tuple(arms), schedule, profiles, opts)


def profile_build(profiles: Sequence[NodeProfile]) -> BuildName | None:
    """The build the nodes' profiles name (``kubelet.build``); every node of a sweep runs the
    same arms, so their profiles must agree."""
    builds = {p.kubelet_build for p in profiles}
    if len(builds) > 1:
        raise UserError(
            "the profiles name different kubelet builds ("
            + ", ".join(f"{p.name}: {p.kubelet_build or 'its own'}" for p in profiles)
            + ")",
            "--profile",
            "give --kubelet-build BUILD for every node, or sweep the nodes separately",
        )
    name = builds.pop() if builds else None
    # the profile holds the name it checked when it was loaded (as written): read back here
    return None if name is None else parse_build_name(name, "kubelet.build", paths=False)


def with_build(arms: list[Arm], build: BuildName | None) -> list[Arm]:
    """Every arm on one kubelet build (``--kubelet-build``): the gates of a patched build
    are then switched by config like any gate, on the build each arm swaps in (journaled,
    restored after the sweep). An arm that names its own build cannot take another."""
    if build is None:
        return arms
    own = [a.name for a in arms if a.kubelet is not None]
    if own:
        raise UserError(
            f"arm {own[0]} already runs its own kubelet build (a kubelet_build factor)",
            "--kubelet-build",
            "drop --kubelet-build, or the kubelet_build factor",
        )
    return [replace(a, kubelet=build) for a in arms]


def check_builds_found(
    arms: Sequence[Arm], profiles: Sequence[NodeProfile], where: str | None = None
) -> None:
    """Every build an arm names by its placed name is found in each node's kubelet.builds_dir
    (NodeProfile.build_binary, the rule the profile's own kubelet.build follows): a profile
    without one is refused here, before a plan is shown or a node touched."""
    for arm in arms:
        if isinstance(arm.kubelet, BuildName):
            for profile in profiles:
                profile.build_binary(arm.kubelet, where)


def check_plan_size(arms: int, sizes: int, blocks: int, where: str) -> None:
    """A plan that would take hours to lay out (and years to run) is refused at once."""
    total = arms * sizes * blocks
    if total > num.MAX_SCHEDULED_ROUNDS:
        raise UserError(
            f"{arms} arms x {sizes} sizes x {blocks} blocks = {total} rounds, more "
            f"than the {num.MAX_SCHEDULED_ROUNDS} one sweep may plan",
            where,
            "fewer factors, sizes or rounds",
        )


def check_pod_renders(pb: Playbook, profiles: Sequence[NodeProfile]) -> None:
    """Render one pod now: a template that is missing or broken must be found before the first
    change to a node, not when the first round renders its pods after the kubelet restarted."""
    # imported here: jinja2 is not needed by the commands that never plan
    from abtest.batch.template import load_template, pod_labels, render_pod

    render_pod(
        load_template(pb.workload),
        pb.workload,
        name="abtest-plan-check",
        namespace=pb.namespace,
        node_name=profiles[0].node_name if profiles else "node",
        labels=pod_labels("plan-check", "r0"),
    )


def options_from_json(data: dict[str, object]) -> PlanOptions:
    """The inverse of SweepPlan.to_dict()["options"]."""
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return PlanOptions(**fields)  # type: ignore[arg-type]


def estimate(plan: SweepPlan, history: dict[str, list[float]] | None) -> Estimate:
    """Wall time from what this node measured before (medians), else stated defaults."""
    history = history or {}
    gen = plan.playbook.generator
    restart = _median(history.get("restart_s")) or DEFAULT_RESTART_S
    cleanup = _median(history.get("cleanup_s")) or DEFAULT_CLEANUP_S
    batch: dict[int, float] = {}
    measured = False
    for size in plan.schedule.sizes:
        m = _median(history.get(f"batch_{size}"))
        measured = measured or m is not None
        wait = gen.observe_s + gen.start_dither_s / 2  # the random start's mean
        batch[size] = (m if m is not None else DEFAULT_SECONDS_PER_POD * size) + wait
    source = (
        f"measured on {plan.profiles[0].node_name}"
        if measured or "restart_s" in history
        else f"defaults ({DEFAULT_RESTART_S:.0f} s restart, {DEFAULT_SECONDS_PER_POD} s/pod, "
        f"{DEFAULT_CLEANUP_S:.0f} s cleanup)"
    )
    # a restart only where the kubelet settings change (restart_count), not at every visit
    seconds = estimate_seconds(plan.schedule, 0.0, batch, cleanup) + restart * restart_count(plan)
    return Estimate(seconds, restart, cleanup, batch, source)


def node_estimates(
    plan: SweepPlan, histories: dict[str, dict[str, list[float]]]
) -> list[tuple[str, Estimate]]:
    """Each node's wall time from its own history. The nodes run the same schedule at the same
    time, so the sweep takes the longest of these, not their sum."""
    return [
        (p.node_name, estimate(replace(plan, profiles=(p,)), histories.get(p.node_name)))
        for p in plan.profiles
    ]


def _median(values: list[float] | None) -> float | None:
    clean = [v for v in values or [] if v is not None]
    return statistics.median(clean) if clean else None


def check_crossing(factors: Sequence[Factor], pb: Playbook, *, where: str) -> None:
    """One clear error for a design that crosses a pod-spec thing with itself: a factor named
    twice, two factors for the pod's runtime class (or one annotation), or a factor and the
    playbook's own workload setting the same thing. Nothing is touched before this."""
    seen: dict[str, str] = {}
    if pb.workload.runtime_class:
        seen["pod:runtimeClassName"] = f"the playbook's workload.runtime_class ({pb.source})"
    for key, _ in pb.workload.annotations:
        seen[f"pod:annotations/{key}"] = f"the playbook's workload.annotations ({pb.source})"
    names: set[str] = set()
    for f in factors:
        if f.name in names:
            raise UserError(
                f"factor {f.name!r} is listed twice: a factor cannot be crossed with itself",
                where,
                "list each factor once",
            )
        names.add(f.name)
        for target in f.targets:
            if target == "kubelet:binary":
                continue  # builds are levels of one choice: the design checks each arm
            if target in seen:
                what = target.removeprefix("pod:").replace("annotations/", "annotation ")
                raise UserError(
                    f"{f.name!r} ({f.kind}) and {seen[target]} both set the pod's {what}"
                    if target.startswith("pod:")
                    else f"{f.name!r} and {seen[target]} both set {target}",
                    where,
                    "keep one of them: an arm's pod has one runtime class, and one value per "
                    "annotation",
                )
            seen[target] = f"factor {f.name!r}"


def kubelet_visits(schedule: Schedule) -> list[bool]:
    """For each visit of the schedule, whether it restarts the kubelet: the first visit does,
    and a visit whose kubelet settings (and binary) equal the visit's before it does not
    (arms that differ only in their pod, e.g. runc vs crun, share one kubelet config).
    The sweep applies the same rule (NodeSweep.kubelet_now)."""
    out = []
    before: tuple[Settings, str | None] | None = None
    for v in schedule.visits:
        key = schedule.arm(v.arm).kubelet_key
        out.append(key != before)
        before = key
    return out


def restart_count(plan: SweepPlan) -> int:
    """The kubelet restarts the design costs (per node)."""
    return sum(kubelet_visits(plan.schedule))


# The metrics the report leads with; planning answers for these.
POWER_METRICS: tuple[str, ...] = ("batch_ready_s", "p95_s")


@dataclass(frozen=True)
class PowerRow:
    """What one (size, metric) comparison of the plan can detect, from this node's noise."""

    metric: str
    size: int
    noise: Noise
    blocks: int
    mde_pct: float  # a change this large (either way) is detected with `power`
    detect_pct: float | None  # the change asked for with --detect
    blocks_needed: int | None  # for detect_pct; None when not asked or out of reach
    power_at_detect: float | None = None  # detect_pct's power at `blocks` (either way)
    model: str = "normal model"  # "this node's N rounds ..." when simulated from them
    simulated: bool = False  # from the node's rounds through the analysis (issue 37 §4)
    blocks_cap: int = 10_000  # blocks_needed is None beyond this many
    mde_cap: float = 100.0  # mde_pct is inf when no change up to this is detected
    #: power_at_detect's 90 % interval from the uncertainty of the node's noise (simulated rows
    #: on continuous rounds; issue 46)
    power_interval: tuple[float, float] | None = None


def power_plan(
    plan: SweepPlan,
    history: pd.DataFrame | None,
    *,
    confidence: float = 0.95,
    power: float = 0.80,
    detect_pct: float | None = None,
    metrics: tuple[str, ...] = POWER_METRICS,
) -> list[PowerRow]:
    """MDE of every arm-vs-baseline comparison at the plan's block count, and with
    ``detect_pct`` its power there and the blocks it needs: simulated from the node's own
    rounds (``history``, ``experiment.history.noise_history``) when it has enough of them
    (``abtest.stats.round_model``), else the normal model with its noise or the default."""
    from abtest.stats.power import default_noise, noise_from_history
    from abtest.stats.power_sim import MAX_SIM_BLOCKS
    from abtest.stats.round_model import round_model

    rows = []
    for metric in metrics:
        for size in plan.schedule.sizes:
            if history is None or history.empty:
                noise = default_noise(metric, size, "no earlier runs on this node")
                model = None
            else:
                noise = noise_from_history(history, metric=metric, size=size)
                model = round_model(history, metric=metric, size=size)
            # the pooled comparison pairs (node, block): every node adds its blocks
            blocks = plan.playbook.rounds * len(plan.profiles)
            if model is not None and blocks <= MAX_SIM_BLOCKS:
                rows.append(_simulated_row(model, noise, blocks, confidence, power, detect_pct))
            else:
                row = _normal_row(noise, blocks, confidence, power, detect_pct)
                if model is not None:  # issue 46: 1000 blocks x 8 nodes simulated for minutes
                    why = f"{blocks} blocks: the node's rounds simulate up to {MAX_SIM_BLOCKS}"
                    row = replace(row, model=f"{row.model} ({why})")
                rows.append(row)
    return rows


def _simulated_row(
    model: RoundModel,
    noise: Noise,
    blocks: int,
    confidence: float,
    power: float,
    detect_pct: float | None,
) -> PowerRow:
    from abtest.stats.power_sim import MAX_MDE_PCT, MAX_SIM_BLOCKS, plan_from_rounds

    sim = plan_from_rounds(model, blocks, confidence, detect_pct, power)
    return PowerRow(
        model.metric, model.size, noise, blocks, sim.mde_pct, detect_pct, sim.blocks_needed,
        sim.power_at, model.source, True, MAX_SIM_BLOCKS, MAX_MDE_PCT, sim.power_interval,
    )  # fmt: skip


def _normal_row(
    noise: Noise, blocks: int, confidence: float, power: float, detect_pct: float | None
) -> PowerRow:
    from abtest.stats.power import (
        MAX_BLOCKS,
        blocks_needed,
        detectable,
        log_of_pct,
        paired_power,
    )

    found = detectable(noise.sd_log_diff, blocks, confidence, power)
    needed = power_at = None
    if detect_pct is not None:
        needed = blocks_needed(noise.sd_log_diff, detect_pct, confidence, power)
        power_at = paired_power(log_of_pct(detect_pct), noise.sd_log_diff, blocks, confidence)
    why = "normal model" if noise.from_history else "normal model, default noise"
    return PowerRow(
        noise.metric, noise.size, noise, blocks, found.mde_pct, detect_pct, needed, power_at,
        why, False, MAX_BLOCKS,
    )  # fmt: skip


def parse_percent(text: str, flag: str) -> float:
    """``5%`` or ``5`` -> 5.0 (a change in percent, strictly between 0 and 100)."""
    raw = text.strip().removesuffix("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise UserError(f"{text!r} is not a percent", flag, "give e.g. 5% or 5") from None
    if not (0.0 < value < 100.0):
        raise UserError(f"{text!r} is not between 0 and 100 %", flag, "give e.g. 5%")
    return value
