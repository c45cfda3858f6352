"""The detail tables: attribution, factorial effects, acceptance, rounds left out, kubelet
stages, restarts. Formatting of the model only."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from abtest.analysis.report_model import METRIC_LABELS, ReportModel
from abtest.report.fmt import DASH, Table, make_table, ms, num, p_value, with_ci

if TYPE_CHECKING:  # the types the model holds; the renderers call no statistics
    from abtest.stats import (
        Attribution,
        Comparison,
        FactorAttribution,
        FactorialEffects,
        NonAdditivity,
    )


def _saving(c: Comparison) -> str:
    return with_ci(c.savings_s, c.savings_ci, c.savings_note, 3, sign=True)


def _pct(c: Comparison) -> str:
    return with_ci(c.pct_reduction, c.pct_ci, c.pct_note, 1, sign=True)


def _has_odd_names(a: Attribution) -> bool:
    """The single arm's name is only worth a column when it is not the usual "+Factor"."""
    return any(f.single_arm not in (None, "+" + f.factor) for f in a.factors)


def _has_marginal(a: Attribution) -> bool:
    return any(f.marginal is not None for f in a.factors)


def _attribution_row(f: FactorAttribution, odd_names: bool, has_marginal: bool) -> list[str]:
    row = [f.factor, f.single_arm or DASH] if odd_names else [f.factor]
    row += [
        _saving(f.alone) if f.alone else DASH,
        _pct(f.alone) if f.alone else DASH,
        p_value(f.alone.p_adjusted) if f.alone else DASH,
    ]
    if has_marginal:
        row += [
            _saving(f.marginal) if f.marginal else DASH,
            p_value(f.marginal.p_adjusted) if f.marginal else DASH,
        ]
    share = with_ci(f.share_s, f.share_ci) if f.share_ci else num(f.share_s)
    row += [share, num(f.share_pct, 1)]
    return row


def _attribution_columns(a: Attribution, ci: str, odd_names: bool, has_marginal: bool) -> list[str]:
    columns = ["Factor", "Single arm"] if odd_names else ["Factor"]
    columns += [
        f"Alone: saving s [{ci} CI]",
        f"Alone: reduction % [{ci} CI]",
        "Alone p (Holm)",
    ]
    if has_marginal:
        columns += [f"Marginal: saving s [{ci} CI]", "Marginal p (Holm)"]
    share_kind = {
        "shapley": f"Shapley share s [{ci} CI]",
        "approximate": "Share s (approx.)",
        "unavailable": "Share s",
    }[a.share_method]
    columns += [share_kind, "Share %"]
    return columns


def _non_additivity_note(na: NonAdditivity) -> str:
    rounds_used = "the same complete blocks" if na.method == "paired" else "the same rounds"
    all_rounds = ""
    if not (
        math.isclose(na.combined_saving_all_rounds_s, na.combined_saving_s, abs_tol=5e-4)
        and math.isclose(na.sum_of_singles_all_rounds_s, na.sum_of_singles_s, abs_tol=5e-4)
    ):
        # Shown, but labelled: it is not what the interval was computed from.
        all_rounds = (
            f" (all rounds, not the interval's: combined "
            f"{num(na.combined_saving_all_rounds_s)} s, sum of singles "
            f"{num(na.sum_of_singles_all_rounds_s)} s)"
        )
    return (
        f"Non-additivity (combined saving - sum of single savings): "
        f"{with_ci(na.excess_s, na.excess_ci, na.note, 3, sign=True)} s, "
        f"p {p_value(na.p_value)} ({na.method}); from {rounds_used}: combined "
        f"{num(na.combined_saving_s)} s, sum of singles {num(na.sum_of_singles_s)} s"
        f"{all_rounds}. > 0: the factors help each other; < 0: they overlap."
    )


def _attribution_notes(a: Attribution, has_marginal: bool) -> list[str]:
    singles = sum(f.alone is not None for f in a.factors)
    notes = [
        f"Alone p (Holm): Holm over the {singles} single-factor arms at this size, not the "
        f"savings table's family (every arm vs {a.baseline}), so the same comparison can show "
        "a smaller adjusted p here."
    ]
    if has_marginal:
        marginals = sum(f.marginal is not None for f in a.factors)
        notes.append(
            f"Marginal p (Holm): Holm over the {marginals} combined-vs-leave-one-out "
            "comparisons at this size."
        )
    if a.combined is not None:
        notes.append(
            f"Arm {a.combined_arm} (every factor on) vs {a.baseline}: saving "
            f"{_saving(a.combined)} s, reduction {_pct(a.combined)} %."
        )
    if a.non_additivity is not None:
        notes.append(_non_additivity_note(a.non_additivity))
    if a.share_method == "shapley":
        notes.append("Shares are exact Shapley values (every subset of the factors measured).")
    notes.append(a.note[:1].upper() + a.note[1:])
    return notes


def attribution_table(model: ReportModel, a: Attribution, ci: str) -> Table:
    has_marginal = _has_marginal(a)
    odd_names = _has_odd_names(a)
    return make_table(
        key=f"attribution-{a.metric.removesuffix('_s').replace('_', '-')}-{a.size}",
        title=f"Attribution, {METRIC_LABELS[a.metric].lower()}, {a.size} pods",
        columns=_attribution_columns(a, ci, odd_names, has_marginal),
        rows=[_attribution_row(f, odd_names, has_marginal) for f in a.factors],
        left=2 if odd_names else 1,
        notes=_attribution_notes(a, has_marginal),
    )


def factorial_table(f: FactorialEffects, ci: str) -> Table:
    rows = [
        [
            " x ".join(e.term),
            "main" if len(e.term) == 1 else "interaction",
            with_ci(e.pct_reduction, e.pct_ci, "n too small" if f.residual_df < 1 else f.note, 1),
            with_ci(e.log_effect, e.log_ci, "n too small" if f.residual_df < 1 else f.note, 4),
            p_value(e.p_value),
        ]
        for e in (*f.main, *f.interactions)
    ]
    return make_table(
        key=f"factorial-{f.metric.removesuffix('_s').replace('_', '-')}-{f.size}",
        title=f"Factorial effects, {METRIC_LABELS[f.metric].lower()}, {f.size} pods",
        columns=["Term", "Kind", f"Reduction % [{ci} CI]", f"Log effect [{ci} CI]", "p"],
        rows=rows,
        left=2,
        notes=[
            f"{f.n_rounds} rounds, residual df {f.residual_df}, block effects "
            f"{'in the model' if f.blocked else 'not modelled'}.",
            f.note,
        ],
    )


def acceptance_table(model: ReportModel) -> Table:
    rows = []
    totals = [0] * 7
    for r in model.acceptance:
        counts = [
            r.rounds,
            r.warmup,
            r.accepted,
            r.failed,
            r.restarts,
            r.ready_regressions,
            r.sandbox_failures,
        ]
        totals = [t + c for t, c in zip(totals, counts, strict=True)]
        reasons = "; ".join(f"{n}x {why}" for why, n in r.reasons) or DASH
        rows.append([r.arm, str(r.size), *map(str, counts), num(r.cleanup_median_s, 2), reasons])
    rows.append(["total", "", *map(str, totals), "", ""])
    return make_table(
        key="acceptance",
        title="Acceptance: rounds accepted and failed, restarts, Ready regressions, "
        "sandbox-creation failures",
        columns=[
            "Arm",
            "Pods",
            "Rounds",
            "Warm-up",
            "Accepted",
            "Failed",
            "Restarts",
            "Ready regressions",
            "Sandbox failures",
            "Cleanup median s",
            "Failure reasons",
        ],
        rows=rows,
        left=2,
        notes=[
            "Accepted = non-warm-up rounds that passed acceptance; only those are analysed. "
            "Restarts, regressions and FailedCreatePodSandBox events are summed over every round."
        ],
    )


def excluded_table(model: ReportModel) -> Table | None:
    if not model.excluded:
        return None
    return make_table(
        key="excluded",
        title="Rounds left out of the analysis",
        columns=["Round", "Block", "Arm", "Pods", "Why"],
        rows=[
            [str(e.round_id), DASH if e.block is None else str(e.block), e.arm, str(e.size), e.why]
            for e in model.excluded
        ],
        left=3,
    )


def stages_table(model: ReportModel) -> Table | None:
    if not model.stages:
        return None
    arms = [a for a in model.arm_names() if any(s.arm == a for s in model.stages)]
    by_key: dict[tuple[str, str], dict[str, str]] = {}
    for s in model.stages:
        by_key.setdefault((s.metric, s.labels), {})[s.arm] = ms(s.median_s)
    rows = [
        [_short_metric(metric), labels or DASH, *(cells.get(a, DASH) for a in arms)]
        for (metric, labels), cells in by_key.items()
    ]
    return make_table(
        key="kubelet-stages",
        title="Kubelet stage deltas per arm, milliseconds per observation (median over rounds)",
        columns=["Kubelet histogram", "Labels", *arms],
        rows=rows,
        left=2,
        notes=[
            "Per analysed round: delta_sum / delta_count of the histogram between the scrapes "
            "before and after the round; the median over the arm's rounds. Histogram names "
            "without kubelet_ and _seconds. Descriptive, no intervals."
        ],
    )


def _arms_across(
    model: ReportModel, cells: list[tuple[str, str, int, str, float]]
) -> tuple[list[str], list[list[str]]]:
    """Per-pod medians ``(key1, key2, size, arm, value)`` as rows ``key1, key2, size`` with
    one column per arm that has any (a dash where an arm lacks the row)."""
    arms = [a for a in model.arm_names() if any(c[3] == a for c in cells)]
    by_key: dict[tuple[str, str, int], dict[str, str]] = {}
    for first, second, size, arm, value in cells:
        by_key.setdefault((first, second, size), {})[arm] = num(value, 2)
    rows = [
        [first, second, str(size), *(row.get(a, DASH) for a in arms)]
        for (first, second, size), row in by_key.items()
    ]
    return arms, rows


def _per_pod_table(
    model: ReportModel,
    key: str,
    title: str,
    keys: tuple[str, str],
    cells: list[tuple[str, str, int, str, float]],
    note: str,
) -> Table | None:
    """A descriptive per-pod table: two key columns and the size as rows, one column per arm;
    None when nothing was counted (no cells)."""
    if not cells:
        return None
    arms, rows = _arms_across(model, cells)
    return make_table(
        key=key, title=title, columns=[*keys, "Pods", *arms], rows=rows, left=3, notes=[note]
    )


def events_table(model: ReportModel) -> Table | None:
    return _per_pod_table(
        model,
        "events-per-pod",
        "Events per pod, by reason (median over analysed rounds)",
        ("Reason", "Type"),
        [(e.reason, e.type or DASH, e.size, e.arm, e.per_pod_median) for e in model.events],
        "The events about the round's pods as listed at the end of the round (scheduler "
        "and kubelet), repeats counted, divided by the round's pods; warnings first. "
        "A warning near 1 or more per pod repeats for every pod: look for its cause on "
        "the node. Descriptive, no intervals; a dash in Type: stored before event types "
        "were recorded.",
    )


def api_requests_table(model: ReportModel) -> Table | None:
    return _per_pod_table(
        model,
        "api-requests-per-pod",
        "Kubelet API requests per pod, by method and code (median over analysed rounds)",
        ("Method", "Code"),
        [(r.method, r.code, r.size, r.arm, r.per_pod_median) for r in model.api_requests],
        "The kubelet's own requests to the API server (client-go's "
        "rest_client_requests_total) between the metrics scraped before the round and "
        "after its observation window, cleanup not included, divided by the round's pods. "
        "Per pod at start-up: the kubelet's events are most of its POSTs (201), each "
        "status write a GET and a PATCH. Descriptive, no intervals.",
    )


def mechanisms_table(model: ReportModel) -> Table | None:
    return _per_pod_table(
        model,
        "mechanism-counters-per-pod",
        "Mechanism counters per pod (the patch series' own counters, median over rounds)",
        ("Counter", "Labels"),
        [(_short_metric(r.metric), r.labels or DASH, r.size, r.arm, r.per_pod_median)
         for r in model.mechanisms],
        "Whether each gate's mechanism engaged and how much it did, whatever the batch time "
        "did: the round's counter delta divided by its pods, the median over the arm's "
        "analysed rounds (kubelet-patches/agc/README.md says what each counts). An arm on "
        "a build without the counters has no column. Descriptive, no intervals.",
    )  # fmt: skip


def _short_metric(metric: str) -> str:
    return metric.removeprefix("kubelet_").removesuffix("_seconds")


def restarts_table(model: ReportModel) -> Table | None:
    if not model.restarts:
        return None
    return make_table(
        key="restarts",
        title="Kubelet restarts and time to healthy per arm (medians, seconds)",
        columns=[
            "Arm",
            "Visits",
            "Applied",
            "Verified",
            "Errors",
            "Restart to healthz s",
            "Restart to node Ready s",
            "Restart to gates verified s",
        ],
        rows=[
            [
                r.arm,
                str(r.visits),
                str(r.applied),
                str(r.verified),
                str(r.errors),
                num(r.healthz_median_s, 2),
                num(r.ready_median_s, 2),
                num(r.verified_median_s, 2),
            ]
            for r in model.restarts
        ],
    )
