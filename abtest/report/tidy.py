"""The tidy data behind the report: one frame per table (CSV) and one JSON document.

CSV files (one row per observation, one column per variable):

- ``comparisons.csv``: every arm vs the baseline, per size and metric (savings, percent
  reduction, intervals, p and Holm-adjusted p);
- ``arm_summary.csv``: per arm, size and metric: n, mean with its interval, median;
- ``rounds.csv``: every round of the run (warm-up and rejected included, ``included`` says
  which were analysed) with its summary metrics and acceptance counts;
- ``rounds_analysed.csv``: the analysed rounds only, in the format ``abtest analyze`` reads,
  so the comparisons can be re-derived from the file alone;
- ``pods.csv``: every pod's stored timestamps and its latency, so every percentile and batch
  ready time can be recomputed;
- ``attribution.csv`` / ``non_additivity.csv`` / ``factorial.csv`` when the run has them;
- ``acceptance.csv``, ``kubelet_stages.csv``, ``restarts.csv``, ``environment.csv``;
- ``two_way.csv`` / ``two_way_savings.csv`` / ``two_way_interaction.csv`` when the run
  crosses one pod-spec factor with kubelet factors (the runtime x settings table);
- ``where_time_went.csv``: per arm vs baseline and size, every pod phase and kubelet stage's
  saving with its interval and share of the batch saving (the report shows the top stages).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from abtest.analysis.report_model import ReportModel
from abtest.config.csv_cells import safe_cell
from abtest.config.paths import write_output
from abtest.report.tidy_reference import reference_frames

if TYPE_CHECKING:  # the types the model holds; the renderers call no statistics
    from abtest.stats import Comparison
    from abtest.stats.power import Detectable


ROUND_COLUMNS = (
    "id",
    "node_name",
    "block",
    "arm",
    "size",
    "ordinal",
    "warmup",
    "accepted",
    "included",
    "reason",
    "pods_ready",
    "batch_ready_s",
    "p50_s",
    "p95_s",
    "p99_s",
    "mean_s",
    "submit_rate",
    "restarts",
    "ready_regressions",
    "sandbox_failures",
    "create_failures",
    "cleanup_s",
)


def plain(value: Any) -> Any:
    """JSON-ready: dataclasses to dicts, tuples to lists, NaN/inf to None, numpy to Python."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, frozenset | set):
        return sorted(plain(v) for v in value)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def _interval_columns(prefix: str, ci: tuple[float, float] | None) -> dict[str, float | None]:
    lo, hi = ci if ci is not None else (None, None)
    return {f"{prefix}_lo": lo, f"{prefix}_hi": hi}


def _comparison_row(c: Comparison, found: Detectable | None = None) -> dict[str, Any]:
    row = {k: v for k, v in plain(c).items() if not k.endswith("_ci")}
    for name in ("savings_ci", "ratio_ci", "pct_ci"):
        row.update(_interval_columns(name.removesuffix("_ci") + "_ci", getattr(c, name)))
    row.update(_detectable_columns(found))
    return row


def _detectable_columns(found: Detectable | None) -> dict[str, Any]:
    """The minimum detectable effect the run achieved (80 % power, its own paired noise)."""
    return {
        "mde_pct": plain(found.mde_pct) if found else None,
        "mde_log": plain(found.mde_log) if found else None,
        "mde_power": found.power if found else None,
        "mde_sd_log_diff": found.sd_log_diff if found else None,
    }


def frames(model: ReportModel) -> dict[str, pd.DataFrame]:
    """File stem -> tidy frame, only for the tables the run has data for."""
    out: dict[str, pd.DataFrame] = {
        "comparisons": pd.DataFrame(
            [_comparison_row(c, model.detectable_for(c)) for c in model.comparisons]
        ),
        "arm_summary": pd.DataFrame(_arm_summary_rows(model)),
        "rounds": _all_rounds(model),
        "rounds_analysed": _analysed_rounds(model),
        "pods": model.pods,
        "attribution": pd.DataFrame(_attribution_rows(model)),
        "non_additivity": pd.DataFrame(_non_additivity_rows(model)),
        "factorial": pd.DataFrame(_factorial_rows(model)),
        "acceptance": pd.DataFrame(_acceptance_rows(model)),
        "kubelet_stages": pd.DataFrame([plain(s) for s in model.stages]),
        "events_per_pod": pd.DataFrame([plain(e) for e in model.events]),
        "api_requests_per_pod": pd.DataFrame([plain(r) for r in model.api_requests]),
        "mechanism_counters_per_pod": pd.DataFrame([plain(r) for r in model.mechanisms]),
        "restarts": pd.DataFrame([plain(r) for r in model.restarts]),
        "environment": pd.DataFrame(model.environment, columns=["item", "value"]),
        **reference_frames(model),
    }
    return {name: frame for name, frame in out.items() if not frame.empty}


def _arm_summary_rows(model: ReportModel) -> list[dict[str, Any]]:
    return [
        {**{k: v for k, v in plain(m).items() if k != "ci"}, **_interval_columns("mean_ci", m.ci)}
        for m in model.arm_metrics
    ]


def _all_rounds(model: ReportModel) -> pd.DataFrame:
    columns = [c for c in ROUND_COLUMNS if c in model.rounds.columns]
    return model.rounds[columns].rename(columns={"id": "round_id"})


def _non_additivity_rows(model: ReportModel) -> list[dict[str, Any]]:
    return [
        {
            "metric": a.metric,
            "size": a.size,
            "combined_arm": a.combined_arm,
            **{k: v for k, v in plain(a.non_additivity).items() if k != "excess_ci"},
            **_interval_columns("excess_ci", a.non_additivity.excess_ci),
        }
        for a in model.attributions
        if a.non_additivity is not None
    ]


def _factorial_rows(model: ReportModel) -> list[dict[str, Any]]:
    return [
        {
            "metric": f.metric,
            "size": f.size,
            "term": " x ".join(e.term),
            "kind": "main" if len(e.term) == 1 else "interaction",
            "log_effect": e.log_effect,
            **_interval_columns("log_ci", e.log_ci),
            "pct_reduction": e.pct_reduction,
            **_interval_columns("pct_ci", e.pct_ci),
            "p_value": e.p_value,
            "residual_df": f.residual_df,
            "blocked": f.blocked,
            "note": f.note,
        }
        for f in model.factorial
        for e in (*f.main, *f.interactions)
    ]


def _acceptance_rows(model: ReportModel) -> list[dict[str, Any]]:
    return [
        {
            **{k: v for k, v in plain(r).items() if k != "reasons"},
            "reasons": "; ".join(f"{why} ({n})" for why, n in r.reasons),
        }
        for r in model.acceptance
    ]


def _analysed_rounds(model: ReportModel) -> pd.DataFrame:
    rows = model.rounds[model.rounds["included"]]
    frame = pd.DataFrame({"arm": rows["arm"], "size": rows["size"]})
    labels = rows["block_label"]
    if len(rows) and labels.notna().all():
        frame["block"] = labels
    for metric in model.metrics:
        frame[metric] = rows[metric]
    frame["round_id"] = rows["id"]
    # Arms in report order, so `abtest analyze` on this file lists them the same way.
    rank = {arm: i for i, arm in enumerate(model.arm_names())}
    frame["_rank"] = frame["arm"].map(rank)
    frame = frame.sort_values(["_rank", "size", "round_id"], kind="stable")
    return frame.drop(columns="_rank").reset_index(drop=True)


def _attribution_rows(model: ReportModel) -> list[dict[str, Any]]:
    rows = []
    for a in model.attributions:
        for f in a.factors:
            row: dict[str, Any] = {
                "metric": a.metric,
                "size": a.size,
                "factor": f.factor,
                "single_arm": f.single_arm,
                "leave_one_out_arm": f.leave_one_out_arm,
                "share_method": a.share_method,
                "share_s": f.share_s,
                **_interval_columns("share_ci", f.share_ci),
                "share_pct": f.share_pct,
            }
            for kind, c in (("alone", f.alone), ("marginal", f.marginal)):
                row[f"{kind}_savings_s"] = c.savings_s if c else None
                row.update(_interval_columns(f"{kind}_savings_ci", c.savings_ci if c else None))
                row[f"{kind}_pct_reduction"] = c.pct_reduction if c else None
                row.update(_interval_columns(f"{kind}_pct_ci", c.pct_ci if c else None))
                row[f"{kind}_p_value"] = c.p_value if c else None
                row[f"{kind}_p_adjusted"] = c.p_adjusted if c else None
            rows.append(row)
    return rows


def to_json(model: ReportModel) -> dict[str, Any]:
    """The report as one JSON document (everything but the per-pod data, which is pods.csv)."""
    tidy = frames(model)
    document: dict[str, Any] = plain(
        {
            "run_id": model.run_id,
            "run": {k: v for k, v in model.run.items() if k != "playbook_text"},
            "playbook_text": model.run.get("playbook_text"),
            "environment": dict(model.environment),
            "method": list(model.method),
            "confidence": model.confidence,
            "baseline": model.baseline,
            "combined_arm": model.combined_arm,
            "factors": model.factors,
            "arms": model.arms,
            "sizes": model.sizes,
            "metrics": model.metrics,
            "blocks": model.blocks,
            "arm_summary": model.arm_metrics,
            "comparisons": [
                {**plain(c), **_detectable_columns(model.detectable_for(c))}
                for c in model.comparisons
            ],
            "until_resolved": model.sequential,
            "fleet": model.fleet,
            "pod_factor": model.pod_factor,
            "two_way": model.two_way,
            "where_time_went": model.time_went,
            "attributions": model.attributions,
            "factorial": model.factorial,
            "acceptance": model.acceptance,
            "excluded_rounds": model.excluded,
            "kubelet_stages": model.stages,
            "events_per_pod": model.events,
            "api_requests_per_pod": model.api_requests,
            "mechanism_counters_per_pod": model.mechanisms,
            "restarts": model.restarts,
            "notes": model.notes,
            "rounds": _records(tidy.get("rounds")),
        }
    )
    return document


def _records(frame: pd.DataFrame | None) -> list[dict[str, Any]]:
    if frame is None:
        return []
    return [
        {str(k): plain(None if _missing(v) else v) for k, v in row.items()}
        for row in frame.to_dict(orient="records")
    ]


def _missing(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def write_csv(model: ReportModel, out_dir: Path, flag: str = "--out") -> list[Path]:
    """One CSV per table; a text cell a spreadsheet would run as a formula is escaped
    (abtest.config.csv_cells)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, frame in frames(model).items():
        safe = frame.copy()
        for column in safe.columns:
            if not pd.api.types.is_numeric_dtype(safe[column]):  # text, in any dtype
                safe[column] = safe[column].map(safe_cell)
        written.append(write_output(out_dir / f"{name}.csv", safe.to_csv(index=False), flag))
    return written


def write_json(model: ReportModel, path: Path, flag: str = "--out") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_output(path, json.dumps(to_json(model), indent=2, allow_nan=False) + "\n", flag)
