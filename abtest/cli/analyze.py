"""`abtest analyze ROUNDS.csv`: savings and percent reduction vs a baseline, with intervals.

Analyses rounds measured by any tool (the CSV format is in ``abtest.ingest.rounds_csv``). Every
size is its own table; Holm adjusts the p-values across the arms of one (size, metric) table.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from abtest.app.analyze import Analysis
from abtest.app.analyze import analyze as analyze_rounds
from abtest.cli import analyze_formats
from abtest.cli import options as o
from abtest.cli import sources as s
from abtest.cli.render import console, echo, err_console, print_json, print_table
from abtest.errors import UserError
from abtest.ingest.rounds import RoundsSource
from abtest.report.fmt import detectable_cell, no_interval
from abtest.stats import METRICS, Comparison

METHOD_LINES = (
    "Percent reduction = (B - T) / B x 100 on geometric means (log scale), t-interval; "
    "savings = B - T in seconds on means.",
    "Paired by block where rounds come in blocks that pair up, Welch otherwise; "
    "p-values test 'no change', Holm-adjusted across the arms of each table.",
    "Means are the ones the saving is made of (complete blocks when paired); "
    "'(all x)': the mean over every round, where that differs.",
    "could detect %: the run's sensitivity, the change (either way) it would have detected "
    "with 80 % power, from its own per-block noise (paired only). Not a bound on the effect: "
    "the interval's bounds are what the data rule out.",
)


@s.OTHER_TOOLS.into("tools")
def analyze(
    csv_path: Annotated[
        Path | None,
        typer.Argument(
            metavar="ROUNDS.csv",
            help="One row per round: arm,size[,block],metrics; exact duplicate rows are refused "
            "(add a round column if they are distinct rounds).",
        ),
    ] = None,
    *,
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
    confidence: o.Confidence = 0.95,
    json_out: o.Json = False,
    tools: RoundsSource,
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
    --arm NAME=GLOB per arm (docs/other-tools.md has the mapping)."""
    if out_format not in analyze_formats.FORMATS:
        raise UserError(
            f"unknown format {out_format!r}",
            "--format",
            f"one of {', '.join(analyze_formats.FORMATS)}",
        )
    source = replace(tools, csv=csv_path)
    result = analyze_rounds(source, baseline=baseline, metrics=metric, confidence=confidence)
    if json_out or out_format == "json":
        print_json(result.to_dict())
    elif out_format in ("md", "csv"):
        _print_text(result, out_format)
    else:
        _print_tables(result)
    if not result.comparisons:
        # Nothing compared is not success (issue 26): the output above lists what was skipped;
        # the exit code tells a script that no comparison was made.
        skipped = ", ".join(f"{arm} at {size}" for arm, size in result.skipped)
        raise UserError(
            "nothing was compared: every arm was skipped, no baseline rounds at its size"
            + (f" ({skipped})" if skipped else ""),
            result.source,
            f"measure {result.baseline} at the sizes the other arms have, or name another "
            "--baseline",
        )


def _print_text(result: Analysis, out_format: str) -> None:
    found = result.comparison_dicts()
    text = (
        analyze_formats.to_markdown(found, result.baseline, result.confidence, list(result.notes))
        if out_format == "md"
        else analyze_formats.to_csv(found)
    )
    echo(text, nl=False)
    for arm, size in result.skipped:
        err_console.print(f"skipped {arm} at size {size}: no baseline rounds there")


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


def _print_tables(result: Analysis) -> None:
    baseline, confidence = result.baseline, result.confidence
    tables: dict[tuple[int, str], list[tuple[Comparison, float | None]]] = {}
    for c, mde in zip(result.comparisons, result.detectable_pct, strict=True):
        tables.setdefault((c.size, c.metric), []).append((c, mde))
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
                "could detect % (80 % power)",
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
                    detectable_cell(mde, c.pct_ci),
                    _fmt_p(c.p_value),
                    _fmt_p(c.p_adjusted),
                    c.note,
                )
                for c, mde in rows
            ],
        )
    for line in METHOD_LINES:
        console.print(line, highlight=False)
    for note in result.notes:
        console.print(f"note: {note}", highlight=False)
    for arm, size in result.skipped:
        err_console.print(f"skipped {arm} at size {size}: no baseline rounds there", style="yellow")
