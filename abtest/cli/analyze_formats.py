"""`abtest analyze --format md|csv`: the comparisons as Markdown tables or one tidy CSV.

Both take the comparisons as `analyze --json` gives them, so the three formats carry the same
numbers. CSV is one row per (size, metric, arm) with the intervals split into low/high columns.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from abtest.config.csv_cells import safe_cell

FORMATS = ("table", "md", "csv", "json")
CSV_COLUMNS = (
    "size",
    "metric",
    "arm",
    "baseline",
    "n_baseline",
    "n_treatment",
    "n_pairs",
    "baseline_mean",
    "treatment_mean",
    # the means savings_s is made of (complete blocks when paired; issue 11 item 17)
    "baseline_mean_matched",
    "treatment_mean_matched",
    "savings_s",
    "savings_ci_low",
    "savings_ci_high",
    "pct_reduction",
    "pct_ci_low",
    "pct_ci_high",
    # the run's sensitivity (80 % power), not a bound on the effect (issue 26)
    "mde_pct",
    "p_value",
    "p_adjusted",
    "confidence",
    "method",
    "note",
)


def _num(value: Any, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _with_ci(value: Any, ci: Sequence[Any] | None, digits: int) -> str:
    text = _num(value, digits)
    if not ci or ci[0] is None or ci[1] is None:
        return text + " (no interval)"
    return f"{text} [{_num(ci[0], digits)}, {_num(ci[1], digits)}]"


def _p(value: Any) -> str:
    return "-" if value is None else f"{value:.3g}"


def to_markdown(
    comparisons: Sequence[dict[str, Any]], baseline: str, confidence: float, notes: Sequence[str]
) -> str:
    """One Markdown table per (size, metric), as the terminal tables."""
    lines: list[str] = []
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for c in comparisons:
        groups.setdefault((c["size"], c["metric"]), []).append(c)
    for (size, metric), rows in groups.items():
        lines += [
            f"### {metric}, {size} pods, vs {baseline} ({confidence:.0%} intervals)",
            "",
            "| arm | n base/arm | base mean s | arm mean s | saving s [CI] | reduction % [CI] "
            "| could detect % (80 % power) | p | p Holm | note |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for c in rows:
            n = f"{c['n_baseline']}/{c['n_treatment']}"
            cells = [
                c["arm"],
                n + (f" ({c['n_pairs']} pairs)" if c["method"] == "paired" else ""),
                # the means the saving is made of (complete blocks when paired), as on screen
                _num(c.get("baseline_mean_matched", c["baseline_mean"]), 3),
                _num(c.get("treatment_mean_matched", c["treatment_mean"]), 3),
                _with_ci(c["savings_s"], c["savings_ci"], 3),
                _with_ci(c["pct_reduction"], c["pct_ci"], 1),
                "-" if c.get("mde_pct") is None or not c["pct_ci"] else _num(c["mde_pct"], 1),
                _p(c["p_value"]),
                _p(c["p_adjusted"]),
                c["note"] or "",
            ]
            lines.append("| " + " | ".join(str(x).replace("|", "\\|") for x in cells) + " |")
        lines.append("")
    lines += [f"Note: {n}" for n in notes]
    return "\n".join(lines).rstrip() + "\n"


def to_csv(comparisons: Sequence[dict[str, Any]]) -> str:
    """One row per comparison; empty cells where a number or interval could not be made."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for c in comparisons:
        row = {k: c.get(k) for k in CSV_COLUMNS if k in c}
        for name in ("savings_ci", "pct_ci"):
            low, high = c.get(name) or (None, None)
            row[f"{name}_low"], row[f"{name}_high"] = low, high
        writer.writerow({k: "" if v is None else safe_cell(v) for k, v in row.items()})
    return buf.getvalue()
