"""`abtest analyze ROUNDS.csv`: savings and percent reduction vs a baseline, with intervals.

Analyses rounds measured by any tool (the CSV format is in ``abtest.cli.rounds_csv``). Every
size is its own table; Holm adjusts the p-values across the arms of one (size, metric) table.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer

from abtest.cli import analyze_formats, sources
from abtest.cli.render import console, err_console, print_json, print_table
from abtest.cli.rounds_csv import require_metrics
from abtest.errors import UserError
from abtest.report.fmt import detectable_cell, no_interval
from abtest.stats import METRICS, Comparison, compare, uncomparable
from abtest.stats.intervals import check_confidence
from abtest.stats.power import achieved

METHOD_LINES = (
    "Percent reduction = (B - T) / B x 100 on geometric means (log scale), t-interval; "
    "savings = B - T in seconds on means.",
    "Paired by block where rounds come in blocks that pair up, Welch otherwise; "
    "p-values test 'no change', Holm-adjusted across the arms of each table.",
    "Means are the ones the saving is made of (complete blocks when paired); "
    "'(all x)': the mean over every round, where that differs.",
    "Detectable %: the smallest change (either way) the comparison would have detected with 80 % "
    "power, from its own per-block noise (paired only); '< X if any' where the interval "
    "includes 0.",
)


def analyze(
    csv_path: Annotated[
        Path | None,
        typer.Argument(
            metavar="ROUNDS.csv",
            help="One row per round: arm,size[,block],metrics; exact duplicate rows are refused "
            "(add a round column if they are distinct rounds).",
        ),
    ] = None,
    baseline: Annotated[
        str, typer.Option("--baseline", help="Arm every other arm is compared with.")
    ] = "baseline",
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            help=f"Metric column to analyse ({', '.join(METRICS)}); repeat or comma-separate. "
            "Default: every metric column in the file.",
        ),
    ] = None,
    confidence: Annotated[
        float, typer.Option("--confidence", help="Two-sided interval level, e.g. 0.95.")
    ] = 0.95,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    kube_burner: Path | None = sources.KUBE_BURNER,
    clusterloader2: Path | None = sources.CLUSTERLOADER2,
    arm_globs: list[str] | None = sources.ARM,
    job: str | None = sources.JOB,
    block: str | None = sources.BLOCK,
    run_size: int | None = sources.SIZE,
    latency: str | None = sources.LATENCY,
    out_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="table (terminal), md (Markdown tables), csv (one row per comparison), json.",
        ),
    ] = "table",
) -> None:
    """Compare every arm with the baseline: savings and percent reduction with intervals.

    Rounds come from ROUNDS.csv, or from kube-burner or clusterloader2 output with one
    --arm NAME=GLOB per arm (see the README for the mapping)."""
    check_confidence(confidence)
    if out_format not in analyze_formats.FORMATS:
        raise UserError(
            f"unknown format {out_format!r}",
            "--format",
            f"one of {', '.join(analyze_formats.FORMATS)}",
        )
    json_out = json_out or out_format == "json"
    loaded = sources.load_rounds(
        csv_path, kube_burner, clusterloader2, arm_globs, job, block, run_size, latency
    )
    rounds, where = loaded.frame, loaded.source
    metrics = _chosen_metrics(rounds, metric, where)
    arms = [str(a) for a in pd.unique(rounds["arm"])]
    if baseline not in arms:
        raise UserError(
            f"no rounds for the baseline arm {baseline!r}",
            f"{where}, column arm",
            f"name the baseline with --baseline; arms in the file: {', '.join(arms)}",
        )
    if arms == [baseline]:
        raise UserError(
            f"only the baseline arm {baseline!r} is in the file: nothing to compare",
            where,
            "add rounds of at least one other arm",
        )
    comparisons = [
        c
        for m in metrics
        for c in compare(rounds, baseline=baseline, metric=m, confidence=confidence)
    ]
    # One table per size, metrics in the order asked for within it.
    comparisons.sort(key=lambda c: (c.size, metrics.index(c.metric)))
    skipped = uncomparable(rounds, baseline=baseline)

    if json_out:
        print_json(
            {
                "comparisons": [_as_json(c) for c in comparisons],
                "skipped": [
                    {"arm": arm, "size": size, "reason": "no baseline rounds at this size"}
                    for arm, size in skipped
                ],
                "notes": loaded.notes,
            }
        )
        return
    if out_format in ("md", "csv"):
        found = [_as_json(c) for c in comparisons]
        text = (
            analyze_formats.to_markdown(found, baseline, confidence, loaded.notes)
            if out_format == "md"
            else analyze_formats.to_csv(found)
        )
        print(text, end="")
        for arm, size in skipped:
            err_console.print(f"skipped {arm} at size {size}: no baseline rounds there")
        return
    _print_tables(comparisons, baseline, confidence)
    for note in loaded.notes:
        console.print(f"note: {note}", highlight=False)
    for arm, size in skipped:
        err_console.print(f"[yellow]skipped {arm} at size {size}: no baseline rounds there[/]")


def _chosen_metrics(rounds: pd.DataFrame, asked: list[str] | None, where: str) -> list[str]:
    """--metric names (repeat or comma-separate) checked against the file; default: every metric
    column in it. A bad cell only rejects the file when its metric is analysed."""
    if not asked:
        return require_metrics(rounds, None, where)
    names = [part.strip() for item in asked for part in item.split(",") if part.strip()]
    if not names:
        raise UserError("--metric is empty", "--metric", f"choose from {', '.join(METRICS)}")
    return require_metrics(rounds, names, where)


def _number(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _pair(interval: tuple[float, float] | None) -> list[float | None] | None:
    return None if interval is None else [_number(interval[0]), _number(interval[1])]


def _as_json(c: Comparison) -> dict[str, Any]:
    return {
        "arm": c.arm,
        "size": c.size,
        "metric": c.metric,
        "baseline": c.baseline,
        "n_baseline": c.n_baseline,
        "n_treatment": c.n_treatment,
        "n_pairs": c.n_pairs,
        "baseline_mean": _number(c.baseline_mean),
        "treatment_mean": _number(c.treatment_mean),
        "baseline_mean_matched": _number(c.baseline_mean_matched),
        "treatment_mean_matched": _number(c.treatment_mean_matched),
        "baseline_median": _number(c.baseline_median),
        "treatment_median": _number(c.treatment_median),
        "savings_s": _number(c.savings_s),
        "savings_ci": _pair(c.savings_ci),
        "pct_reduction": _number(c.pct_reduction),
        "pct_ci": _pair(c.pct_ci),
        "pct_reduction_arithmetic": _number(c.pct_reduction_arithmetic),
        "p_value": _number(c.p_value),
        "p_adjusted": _number(c.p_adjusted),
        "confidence": c.confidence,
        "method": c.method,
        "note": c.note,
        "savings_note": c.savings_note,
        "pct_note": c.pct_note,
        # the smallest change this comparison could detect (80 % power, its own paired noise)
        "mde_pct": _number(found.mde_pct) if (found := achieved(c)) else None,
    }


def _fmt_interval(
    value: float, interval: tuple[float, float] | None, digits: int, why: str = ""
) -> str:
    if interval is None:
        return f"{value:.{digits}f} ({no_interval(why)})"
    return f"{value:.{digits}f} [{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]"


def _fmt_mean(matched: float, every_round: float) -> str:
    """The mean the saving is made of, and the all-rounds mean when they differ (unbalanced)."""
    text = f"{matched:.3f}"
    return text if f"{every_round:.3f}" == text else f"{text} (all {every_round:.3f})"


def _fmt_p(p: float | None) -> str:
    return "-" if p is None else f"{p:.3g}"


def _print_tables(comparisons: list[Comparison], baseline: str, confidence: float) -> None:
    tables: dict[tuple[int, str], list[Comparison]] = {}
    for c in comparisons:
        tables.setdefault((c.size, c.metric), []).append(c)
    for (size, metric), rows in tables.items():
        print_table(
            f"{metric}, {size} pods, vs {baseline} ({confidence:.0%} intervals)",
            [
                "arm",
                "n base/arm",
                "base mean s",
                "arm mean s",
                "saving s [CI]",
                "reduction % [CI]",
                "detectable %",
                "p",
                "p Holm",
                "note",
            ],
            [
                (
                    c.arm,
                    f"{c.n_baseline}/{c.n_treatment}"
                    + (f" ({c.n_pairs} pairs)" if c.method == "paired" else ""),
                    _fmt_mean(c.baseline_mean_matched, c.baseline_mean),
                    _fmt_mean(c.treatment_mean_matched, c.treatment_mean),
                    _fmt_interval(c.savings_s, c.savings_ci, 3, c.savings_note),
                    _fmt_interval(c.pct_reduction, c.pct_ci, 1, c.pct_note),
                    detectable_cell(found.mde_pct if (found := achieved(c)) else None, c.pct_ci),
                    _fmt_p(c.p_value),
                    _fmt_p(c.p_adjusted),
                    c.note,
                )
                for c in rows
            ],
        )
    for line in METHOD_LINES:
        console.print(line, highlight=False)
