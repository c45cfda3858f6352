"""The reference article's tables: runtime x settings (two-way, per-runtime saving, interaction)
and where the time went. Formatting of the model only."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from abtest.analysis.report_model import ReportModel
from abtest.report.fmt import (
    DASH,
    Table,
    level,
    make_table,
    mean_cell,
    num,
    p_value,
    usual_n,
    with_ci,
)

if TYPE_CHECKING:  # the types the model holds; the renderers call no statistics
    from abtest.stats import Comparison
    from abtest.stats.phases import ItemChange, TimeWent
    from abtest.stats.twoway import TwoWay, TwoWayInteraction


TOP_STAGES = 3  # kubelet stages per (arm, size) in the main text; all of them are in the CSV


def two_way_tables(model: ReportModel, ci: str) -> tuple[Table, ...]:
    t = model.two_way
    if t is None:
        return ()
    return (_cells(model, t, ci), _savings(t, ci), _interactions(t, ci))


def _row_header(model: ReportModel) -> str:
    pod = model.pod_factor
    if pod is None or pod.target == "pod.runtimeClassName":
        return "Runtime"
    return "Annotation " + pod.target.removeprefix("pod.annotations.")


def _with_label(t: TwoWay) -> str:
    return " + ".join(t.settings)


def _cells(model: ReportModel, t: TwoWay, ci: str) -> Table:
    usual = usual_n(t.cells)
    rows = []
    for lv in t.levels:
        row = [lv]
        for size in t.sizes:
            row.extend(mean_cell(t.cell(lv, on, size), usual) for on in (False, True))
        rows.append(row)
    arms = "; ".join(f"{lv} {'with' if on else 'without'} = {arm}" for lv, on, arm in t.arms)
    return make_table(
        key="two-way",
        title=f"Batch ready time, seconds: {t.pod_factor} x {_with_label(t)} (mean [{ci} CI])",
        columns=[
            _row_header(model),
            *(f"{s} pods {w}" for s in t.sizes for w in ("without", "with")),
        ],
        rows=rows,
        notes=[
            f"Rows: the two values of {t.pod_factor}; 'with' = {_with_label(t)} on, "
            f"'without' = off. Arms: {arms}.",
            t.note,
            f"n = {usual} analysed rounds per cell unless marked; the reference article's table "
            "shape (one round each there, no intervals).",
        ],
    )


def _saving(c: Comparison) -> str:
    return with_ci(c.savings_s, c.savings_ci, c.savings_note, 3, sign=True)


def _pct(c: Comparison) -> str:
    return with_ci(c.pct_reduction, c.pct_ci, c.pct_note, 1, sign=True)


def _savings(t: TwoWay, ci: str) -> Table:
    rows = []
    for lv, c in t.savings:
        pairs = f"{c.n_pairs} pairs" if c.method == "paired" else c.method
        rows.append(
            [
                str(c.size),
                lv,
                num(c.baseline_mean_matched),
                num(c.treatment_mean_matched),
                _saving(c),
                _pct(c),
                p_value(c.p_adjusted),
                f"{c.n_baseline}/{c.n_treatment} ({pairs})",
            ]
        )
    return make_table(
        key="two-way-savings",
        title=f"The saving of {_with_label(t)} per {t.pod_factor} level (with vs without)",
        columns=[
            "Pods",
            "Level",
            "Without s",
            "With s",
            f"Saving s [{ci} CI]",
            f"Reduction % [{ci} CI]",
            "p (Holm)",
            "n without/with",
        ],
        rows=rows,
        left=2,
        notes=[
            "Saving = without - with at the same level (positive: the settings make it faster); "
            "reduction on geometric means; both paired by block; p (Holm) over the levels at "
            "each size. Means are the ones the saving is made of (complete blocks when paired).",
        ],
    )


def _reading(i: TwoWayInteraction, on: str, off: str) -> str:
    if i.ratio_ci is None:
        return "no interval: " + (i.note or "n too small")
    lo, hi = i.ratio_ci
    if hi < 1.0:
        return f"depends: the settings cut more on {on}"
    if lo > 1.0:
        return f"depends: the settings cut more on {off}"
    return "no clear dependence (the interval includes 1)"


def _interactions(t: TwoWay, ci: str) -> Table:
    off, on = t.levels
    rows = [
        [
            str(i.size),
            with_ci(i.ratio_of_ratios, i.ratio_ci, i.note, 3),
            with_ci(i.pct_difference, i.pct_ci, i.note, 1, sign=True),
            with_ci(i.savings_diff_s, i.savings_diff_ci, i.note, 3, sign=True),
            p_value(i.p_value),
            f"{i.n_blocks} blocks" if i.method == "paired" else i.method,
            _reading(i, on, off),
        ]
        for i in t.interactions
    ]
    return make_table(
        key="two-way-interaction",
        title=f"Does the saving depend on {t.pod_factor}? Interaction per size",
        columns=[
            "Pods",
            f"Ratio of ratios [{ci} CI]",
            f"Extra reduction on {on} % [{ci} CI]",
            f"Saving on {on} - on {off}, s [{ci} CI]",
            "p",
            "Pairing",
            "Note",
        ],
        rows=rows,
        notes=[
            f"Ratio of ratios = ({on} with / {on} without) / ({off} with / {off} without) on "
            "geometric means, from one four-arm contrast per block on the log scale: 1 = the "
            f"settings cut the same fraction on both; below 1 they cut more on {on}. Extra "
            "reduction = (1 - ratio of ratios) x 100. p tests 'no dependence', not adjusted "
            "across sizes.",
        ],
    )


def two_way_headlines(model: ReportModel) -> tuple[str, ...]:
    """Per size: the settings' reduction at each runtime level and whether it depends on it."""
    t = model.two_way
    if t is None:
        return ()
    lines = []
    for size in t.sizes:
        per_level = [(lv, c) for lv, c in t.savings if c.size == size]
        i = t.interaction(size)
        if len(per_level) != 2 or i is None:
            continue
        cuts = " and ".join(f"{_pct(c)} % on {lv}" for lv, c in per_level)
        off, on = t.levels
        lines.append(
            f"{_with_label(t)} at {size} pods: reduction {cuts} [{level(t.confidence)} CI]; "
            f"ratio of ratios {with_ci(i.ratio_of_ratios, i.ratio_ci, i.note, 3)}: "
            f"{_reading(i, on, off)}."
        )
    return tuple(lines)


# ------------------------------------------------------------------ where the time went

# at most this many resolved phases or stages named per arm and size in the key results
HEADLINE_ITEMS = 2


def time_went_headlines(model: ReportModel) -> tuple[str, ...]:
    """Per arm and size whose batch time did not resolve: the phases and stages that did, with
    Holm over the arm's items at that size, so a moved mechanism is not lost behind a batch
    time whose noise hides it."""
    lines = []
    for w in model.time_went:
        if w.clear:
            continue
        held = w.resolved[:HEADLINE_ITEMS]
        if not held:
            continue
        moved = "; ".join(_moved(c, p, w.n_items) for c, p in held)
        lines.append(
            f"{w.arm} at {w.size} pods, where the time went (batch ready time not resolved): "
            f"{moved}."
        )
    return tuple(lines)


def _moved(c: ItemChange, p_holm: float, family: int) -> str:
    where = f"{item_label(c)} ({c.kind})"
    words = "less" if c.saving_s > 0 else "more"
    lo_hi = None if c.ci is None else (abs(c.ci[0]) * 1000.0, abs(c.ci[1]) * 1000.0)
    if lo_hi is not None and c.saving_s < 0:
        lo_hi = (lo_hi[1], lo_hi[0])
    amount = with_ci(abs(c.saving_s) * 1000.0, lo_hi, c.note, 1)
    return (
        f"{where} {amount} ms {words} ({num(c.baseline_mean * 1000.0, 1)} -> "
        f"{num(c.arm_mean * 1000.0, 1)} ms), p (Holm over its {family} phases and stages) "
        f"{p_value(p_holm)}"
    )


def time_went_tables(model: ReportModel, ci: str) -> tuple[Table, ...]:
    arms = [a for a in model.arm_names() if any(w.arm == a for w in model.time_went)]
    return tuple(
        _time_went(model, [w for w in model.time_went if w.arm == arm], ci) for arm in arms
    )


def _ms_ci(value: float, lo_hi: tuple[float, float] | None, note: str) -> str:
    scaled = None if lo_hi is None else (lo_hi[0] * 1000.0, lo_hi[1] * 1000.0)
    return with_ci(value * 1000.0, scaled, note, 1, sign=True)


# the containers phase split at the runtime's start (abtest.batch.runtime_start's names; the
# report renders, it does not import the batch layer)
CONTAINER_START = "abtest_runtime_container_start_seconds"
STATUS_LAG = "abtest_runtime_status_lag_seconds"
# Stages whose metric name claims a mechanism it does not measure, or that are not kubelet
# metrics, by what their code measures (read in the source: abtest.batch.metrics says where).
STAGE_MEANINGS = {
    # v1.36 observes it from the pod's first status at every write: not a write's delay
    "kubelet_pod_status_sync_duration_seconds": "pod age at status write",
    "kubelet_pod_status_write_delay_seconds": "status write delay",
    # client-go's, not a stage of a pod's start: the kubelet's API round trip, per verb
    "rest_client_request_duration_seconds": "kubelet API request round trip",
    CONTAINER_START: "ready to start seen -> runtime start",
    STATUS_LAG: "status lag: runtime start -> ContainersReady seen",
}
# stages shown for every arm and size whatever their rank: the containers phase split
ALWAYS_SHOWN = (CONTAINER_START, STATUS_LAG)


def stage_label(item: str) -> str:
    """``kubelet_run_podsandbox_duration_seconds{a="b"}`` -> ``run_podsandbox_duration{...}``;
    a stage in ``STAGE_MEANINGS`` reads as what it measures, its metric named after it."""
    name, brace, labels = item.partition("{")
    short = name.removeprefix("kubelet_").removeprefix("abtest_").removesuffix("_seconds")
    short += brace + labels if brace else ""
    meaning = STAGE_MEANINGS.get(name)
    return f"{meaning} ({short})" if meaning else short


def _shown_stages(w: TimeWent) -> tuple[ItemChange, ...]:
    top = w.top_stages(TOP_STAGES)
    return (*top, *(c for c in w.stages if c.item in ALWAYS_SHOWN and c not in top))


def item_label(c: ItemChange) -> str:
    if c.kind == "stage":
        return stage_label(c.item)
    return "per-pod latency (sum of phases)" if c.rank == 0 else c.item


def _share(c: ItemChange) -> str:
    # + 0.0: a share that rounds to zero from below reads "0", not "-0"
    return DASH if c.share_pct is None else f"{round(c.share_pct) + 0.0:.0f}"


def _batch_row(w: TimeWent) -> list[str]:
    b = w.batch
    return [
        str(w.size),
        "batch ready time",
        "batch",
        num(b.baseline_mean_matched * 1000.0, 1),
        num(b.treatment_mean_matched * 1000.0, 1),
        _ms_ci(b.savings_s, b.savings_ci, b.savings_note),
        "100" if w.clear else DASH,
        p_value(w.batch_p_seconds),
    ]


def _item_row(size: int, c: ItemChange) -> list[str]:
    return [
        str(size),
        item_label(c),
        c.kind,
        num(c.baseline_mean * 1000.0, 1),
        num(c.arm_mean * 1000.0, 1),
        _ms_ci(c.saving_s, c.ci, c.note),
        _share(c),
        p_value(c.p_value),
    ]


def _time_went_rows(went: list[TimeWent]) -> list[list[str]]:
    """Per size: the batch row, then its phases and the stages shown."""
    rows: list[list[str]] = []
    for w in went:
        rows.append(_batch_row(w))
        rows.extend(_item_row(w.size, c) for c in (*w.phases, *_shown_stages(w)))
    return rows


def _time_went_notes(went: list[TimeWent], base: str, ci: str) -> list[str]:
    unclear = [str(w.size) for w in went if not w.clear]
    apart = [str(w.size) for w in went if not w.phases_add_up]  # the phases miss the latency
    notes = [
        f"Saving = {base} - arm in milliseconds (positive: the arm spends less time there), "
        f"{ci} t-intervals paired by block like the savings tables, one per row, not adjusted "
        "across rows. Share = saving / batch saving x 100, ranked within phases and within "
        "stages; shares do not add up to 100 % (pods start in parallel, stages overlap).",
        "Phases: per round, the mean over its pods of sent -> scheduled (schedule) -> ready to "
        "start containers (sandbox) -> containers ready (containers) -> Ready (ready); they add "
        "up to the mean per-pod latency. A milestone is when the watch first saw its condition; "
        "one status write can carry several, so a phase can read 0 and the wait for that write "
        "counts in the phase before it. Stages: per round, the kubelet histogram's mean per "
        f"observation; the top {TOP_STAGES} per size here, every stage in where_time_went.csv. "
        "Where the node profile lists the runtime's container starts (CRI started_at), the "
        "containers phase is split there, per round the mean over its pods, on any kubelet: "
        "ready to start seen -> runtime start (negative when the container ran before that "
        "status was visible) and runtime start -> ContainersReady seen (the status pipeline's "
        "lag); both are always shown. The kubelet's pod_status_sync_duration is observed from "
        "a pod's first status at every write, so it reads as the pod's age at the write, not "
        "a write's delay.",
    ]
    if apart:
        notes.append(
            f"At {', '.join(apart)} pods the phases do not add up to the latency: some pods lack "
            "a milestone (a condition the kubelet did not report) or a phase pairs fewer blocks."
        )
    if unclear:
        notes.append(
            f"No share at {', '.join(unclear)} pods: the batch saving's interval there includes "
            "0 (or there is none), so a share of it would be noise; rows are ranked by the size "
            "of their change instead."
        )
    return notes


def _time_went(model: ReportModel, went: list[TimeWent], ci: str) -> Table:
    arm, base = went[0].arm, went[0].baseline
    return make_table(
        key=f"time-went-{_slug(arm)}",
        title=f"Where the time went: {arm} vs {base}",
        columns=[
            "Pods",
            "Phase or stage",
            "Kind",
            f"{base} ms",
            "Arm ms",
            f"Saving ms [{ci} CI]",
            "Share %",
            "p",
        ],
        rows=_time_went_rows(went),
        left=2,
        notes=_time_went_notes(went, base, ci),
    )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "arm"
