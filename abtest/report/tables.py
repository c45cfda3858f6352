"""The report's tables as formatted strings, shared by the Markdown and HTML templates.

``build_tables(model)`` gives every table; the main ones (per-arm times, savings, the combined
arm) are built here, the detail ones in ``tables_detail``.

Shapes follow the reference article (an arm per row, a batch size per column) with the
intervals stats computed. Nothing here computes a statistic: it picks fields of the model
and formats them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from abtest.analysis.report_model import METRIC_LABELS, PRIMARY_METRICS, ReportModel
from abtest.report.fmt import (
    SENSITIVITY_HEADER,
    SENSITIVITY_NOTE,
    Table,
    detectable_cell,
    excluded_text,
    finite,
    level,
    make_table,
    mean_cell,
    num,
    p_value,
    usual_n,
    with_ci,
)
from abtest.report.tables_detail import (
    acceptance_table,
    api_requests_table,
    attribution_table,
    events_table,
    excluded_table,
    factorial_table,
    mechanisms_table,
    restarts_table,
    stages_table,
)
from abtest.report.tables_fleet import fleet_tables
from abtest.report.tables_reference import (
    time_went_headlines,
    time_went_tables,
    two_way_headlines,
    two_way_tables,
)

if TYPE_CHECKING:  # the types the model holds; the renderers call no statistics
    from abtest.stats import Comparison


@dataclass(frozen=True)
class ReportTables:
    headlines: tuple[str, ...]
    per_arm: tuple[Table, ...]  # batch ready time, P95: arm x size
    savings: tuple[Table, ...]  # vs baseline, batch ready time and P95
    combined: Table | None
    attribution: tuple[Table, ...]
    factorial: tuple[Table, ...]
    acceptance: Table
    excluded: Table | None
    stages: Table | None
    restarts: Table | None
    environment: Table
    more: tuple[Table, ...]  # P50 / P99 per arm and vs baseline
    fleet: tuple[Table, ...] = ()  # several nodes: per-node savings, node x arm interaction
    # runtime x settings: cells, per-runtime saving, interaction (one pod-spec factor crossed
    # with kubelet factors)
    two_way: tuple[Table, ...] = ()
    time_went: tuple[Table, ...] = ()  # per arm vs baseline: phases and top kubelet stages
    events: Table | None = None  # events per pod by reason, per arm and size
    api_requests: Table | None = None  # the kubelet's API requests per pod, per arm and size
    mechanisms: Table | None = None  # the patch series' mechanism counters per pod


def build_tables(model: ReportModel) -> ReportTables:
    ci = level(model.confidence)
    primary = [m for m in PRIMARY_METRICS if m in model.metrics]
    others = [m for m in model.metrics if m not in PRIMARY_METRICS]
    return ReportTables(
        headlines=_headlines(model) + two_way_headlines(model) + time_went_headlines(model),
        per_arm=tuple(_per_arm(model, m, ci) for m in primary),
        savings=tuple(t for m in primary if (t := _savings(model, m, ci)) is not None),
        combined=_combined(model, ci),
        attribution=tuple(attribution_table(model, a, ci) for a in model.attributions),
        factorial=tuple(factorial_table(f, ci) for f in model.factorial),
        acceptance=acceptance_table(model),
        excluded=excluded_table(model),
        stages=stages_table(model),
        restarts=restarts_table(model),
        environment=make_table(
            "environment", "Environment", ("Item", "Value"), model.environment, 2
        ),
        more=tuple(
            t
            for m in others
            for t in (_per_arm(model, m, ci), _savings(model, m, ci))
            if t is not None
        ),
        fleet=fleet_tables(model.fleet, model.baseline, ci),
        two_way=two_way_tables(model, ci),
        time_went=time_went_tables(model, ci),
        events=events_table(model),
        api_requests=api_requests_table(model),
        mechanisms=mechanisms_table(model),
    )


def _headlines(model: ReportModel) -> tuple[str, ...]:
    """One line per comparison of batch ready time whose interval excludes 0, and the combined
    arm's at every size; in words, with the interval."""
    lines = []
    for c in model.comparisons_for("batch_ready_s"):
        clear = c.pct_ci is not None and (c.pct_ci[0] > 0 or c.pct_ci[1] < 0)
        if not (clear or c.arm == model.combined_arm):
            continue
        lines.append(
            f"{c.arm} at {c.size} pods: batch ready {num(c.treatment_mean_matched)} s vs "
            f"{num(c.baseline_mean_matched)} s for {c.baseline}; {_change_words(c)}; saving "
            f"{_saving(c)} s; p (Holm) {p_value(c.p_adjusted)}{_if_any(model, c)}."
        )
    return tuple(lines)


def _if_any(model: ReportModel, c: Comparison) -> str:
    """For a change not shown: what the interval rules out, and the run's sensitivity."""
    if c.pct_ci is None or not c.pct_ci[0] <= 0.0 <= c.pct_ci[1]:
        return ""
    text = f"; no change shown: {excluded_text(c.pct_ci)}"
    found = model.detectable_for(c)
    if found is not None and finite(found.mde_pct):
        text += f"; this run could detect {found.mde_pct:.1f} % (80 % power)"
    return text


def _change_words(c: Comparison) -> str:
    """The percent reduction in words: a negative reduction is that much more time."""
    if c.pct_reduction >= 0:
        lo_hi = c.pct_ci
        words = "less time"
        value = c.pct_reduction
    else:
        lo_hi = None if c.pct_ci is None else (-c.pct_ci[1], -c.pct_ci[0])
        words = "more time"
        value = -c.pct_reduction
    return f"{with_ci(value, lo_hi, c.pct_note, 1)} % {words} [{level(c.confidence)} CI]"


def _saving(c: Comparison) -> str:
    return with_ci(c.savings_s, c.savings_ci, c.savings_note, 3, sign=True)


def _pct(c: Comparison) -> str:
    return with_ci(c.pct_reduction, c.pct_ci, c.pct_note, 1, sign=True)


def detectable_text(model: ReportModel, c: Comparison) -> str:
    """The run's sensitivity for ``c``: the change it would have detected with 80 % power."""
    found = model.detectable_for(c)
    return detectable_cell(found.mde_pct if found else None, c.pct_ci)


def _mean(matched: float, every_round: float) -> str:
    """The mean the saving is made of; the all-rounds mean beside it where that differs."""
    text = num(matched)
    return text if num(every_round) == text else f"{text} (all {num(every_round)})"


MATCHED_NOTE = (
    "Means in this table are the ones the saving is made of (complete blocks when paired), so "
    "saving = baseline - arm; '(all x)' is the mean of every analysed round, as in the per-arm "
    "tables, where that differs."
)


def holm_family(model: ReportModel, metric: str) -> str:
    """The family the savings table's Holm adjustment is over, in words."""
    counts = sorted(
        {sum(1 for c in model.comparisons_for(metric) if c.size == s) for s in model.sizes} - {0}
    )
    arms = "/".join(str(n) for n in counts)
    return f"Holm over the {arms} arms vs {model.baseline} at each size (this metric)"


def _per_arm(model: ReportModel, metric: str, ci: str) -> Table:
    cells = {(m.arm, m.size): m for m in model.arm_metrics if m.metric == metric}
    usual = usual_n(list(cells.values()))
    rows = []
    for arm in model.arm_names():
        if not any((arm, s) in cells for s in model.sizes):
            continue
        rows.append([arm, *(mean_cell(cells.get((arm, size)), usual) for size in model.sizes)])
    what = "batch" if metric == "batch_ready_s" else "per-round"
    return make_table(
        key=metric.removesuffix("_s").replace("_", "-"),
        title=f"{METRIC_LABELS[metric]}, seconds: mean of {what} values [{ci} CI]",
        columns=["Arm", *(f"{s} pods" for s in model.sizes)],
        rows=rows,
        notes=[
            f"n = {usual} analysed rounds per cell unless marked; medians are in the tidy data.",
        ],
    )


def _savings(model: ReportModel, metric: str, ci: str) -> Table | None:
    comparisons = model.comparisons_for(metric)
    if not comparisons:
        return None
    with_notes = any(c.note for c in comparisons)
    rows = []
    for c in comparisons:
        pairs = f" ({c.n_pairs} pairs)" if c.method == "paired" else f" ({c.method})"
        row = [
            str(c.size),
            c.arm,
            _mean(c.baseline_mean_matched, c.baseline_mean),
            _mean(c.treatment_mean_matched, c.treatment_mean),
            _saving(c),
            _pct(c),
            detectable_text(model, c),
            p_value(c.p_value),
            p_value(c.p_adjusted),
            f"{c.n_baseline}/{c.n_treatment}{pairs}",
        ]
        rows.append([*row, c.note] if with_notes else row)
    columns = [
        "Pods",
        "Arm",
        f"{model.baseline} s",
        "Arm s",
        f"Saving s [{ci} CI]",
        f"Reduction % [{ci} CI]",
        SENSITIVITY_HEADER,
        "p",
        "p (Holm)",
        "n base/arm",
    ]
    return make_table(
        key=f"savings-{metric.removesuffix('_s').replace('_', '-')}",
        title=f"{METRIC_LABELS[metric]}: savings and percent reduction vs {model.baseline}",
        columns=[*columns, "Note"] if with_notes else columns,
        rows=rows,
        left=2,
        notes=[
            "Saving = baseline - arm (positive: the arm is faster); reduction = (B - T) / B x 100 "
            f"on geometric means; p (Holm): {holm_family(model, metric)}.",
            MATCHED_NOTE,
            DETECTABLE_NOTE,
        ],
    )


DETECTABLE_NOTE = SENSITIVITY_NOTE


def _combined(model: ReportModel, ci: str) -> Table | None:
    if model.combined_arm is None:
        return None
    rows = [
        [
            METRIC_LABELS[c.metric],
            str(c.size),
            _mean(c.baseline_mean_matched, c.baseline_mean),
            _mean(c.treatment_mean_matched, c.treatment_mean),
            _saving(c),
            _pct(c),
            p_value(c.p_adjusted),
        ]
        for metric in model.metrics
        for c in model.comparisons_for(metric, model.combined_arm)
    ]
    if not rows:
        return None
    return make_table(
        key="combined",
        title=f"{model.combined_arm} (all {len(model.factors)} factors on) vs {model.baseline}",
        columns=[
            "Metric",
            "Pods",
            f"{model.baseline} s",
            f"{model.combined_arm} s",
            f"Saving s [{ci} CI]",
            f"Reduction % [{ci} CI]",
            "p (Holm)",
        ],
        rows=rows,
        left=2,
        notes=[
            "Factors on: " + ", ".join(model.factors) + ".",
            f"p (Holm): the savings tables' family, e.g. for {METRIC_LABELS[model.metrics[0]]}: "
            f"{holm_family(model, model.metrics[0])}.",
            MATCHED_NOTE,
        ],
    )
