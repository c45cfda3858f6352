"""The tidy frames of the reference views: the runtime x settings table and where the time
went (every phase and every kubelet stage, not only the top ones the report shows)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from abtest.analysis.report_model import ReportModel

if TYPE_CHECKING:  # the types the model holds; the renderers call no statistics
    from abtest.stats.phases import ItemChange
    from abtest.stats.twoway import TwoWay


def _ci(prefix: str, ci: tuple[float, float] | None) -> dict[str, float | None]:
    lo, hi = ci if ci is not None else (None, None)
    return {f"{prefix}_lo": lo, f"{prefix}_hi": hi}


def reference_frames(model: ReportModel) -> dict[str, pd.DataFrame]:
    """File stem -> frame; empty frames are dropped by the caller."""
    t = model.two_way
    return {
        "two_way": pd.DataFrame(_cells(t) if t else []),
        "two_way_savings": pd.DataFrame(_savings(t) if t else []),
        "two_way_interaction": pd.DataFrame(_interactions(t) if t else []),
        "where_time_went": pd.DataFrame(_time_went(model)),
    }


def _cells(t: TwoWay) -> list[dict[str, Any]]:
    return [
        {
            "metric": t.metric,
            "pod_factor": t.pod_factor,
            "level": c.level,
            "settings": "with" if c.settings_on else "without",
            "arm": c.arm,
            "size": c.size,
            "n": c.n,
            "mean": c.mean,
            **_ci("mean_ci", c.ci),
            "note": c.note,
        }
        for c in t.cells
    ]


def _savings(t: TwoWay) -> list[dict[str, Any]]:
    return [
        {
            "metric": c.metric,
            "pod_factor": t.pod_factor,
            "level": level,
            "size": c.size,
            "without_arm": c.baseline,
            "with_arm": c.arm,
            "without_mean": c.baseline_mean_matched,
            "with_mean": c.treatment_mean_matched,
            "savings_s": c.savings_s,
            **_ci("savings_ci", c.savings_ci),
            "pct_reduction": c.pct_reduction,
            **_ci("pct_ci", c.pct_ci),
            "p_value": c.p_value,
            "p_adjusted": c.p_adjusted,
            "method": c.method,
            "n_pairs": c.n_pairs,
            "note": c.note,
        }
        for level, c in t.savings
    ]


def _interactions(t: TwoWay) -> list[dict[str, Any]]:
    return [
        {
            "metric": t.metric,
            "pod_factor": t.pod_factor,
            "off_level": t.levels[0],
            "on_level": t.levels[1],
            "size": i.size,
            "ratio_of_ratios": i.ratio_of_ratios,
            **_ci("ratio_ci", i.ratio_ci),
            "pct_difference": i.pct_difference,
            **_ci("pct_ci", i.pct_ci),
            "savings_diff_s": i.savings_diff_s,
            **_ci("savings_diff_ci", i.savings_diff_ci),
            "p_value": i.p_value,
            "method": i.method,
            "n_blocks": i.n_blocks,
            "note": i.note,
        }
        for i in t.interactions
    ]


def _time_went(model: ReportModel) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for w in model.time_went:
        head = {"arm": w.arm, "baseline": w.baseline, "size": w.size}
        b = w.batch
        rows.append(
            {
                **head,
                "kind": "batch",
                "item": b.metric,
                "rank": 0,
                "baseline_mean_s": b.baseline_mean_matched,
                "arm_mean_s": b.treatment_mean_matched,
                "saving_s": b.savings_s,
                **_ci("saving_ci", b.savings_ci),
                "share_pct": 100.0 if w.clear else None,
                "p_value": w.batch_p_seconds,
                "method": b.method,
                "n_blocks": b.n_pairs,
                "note": b.savings_note,
            }
        )
        rows.extend(_item_row(head, c) for c in (*w.phases, *w.stages))
    return rows


def _item_row(head: dict[str, Any], c: ItemChange) -> dict[str, Any]:
    return {
        **head,
        "kind": c.kind,
        "item": c.item,
        "rank": c.rank,
        "baseline_mean_s": c.baseline_mean,
        "arm_mean_s": c.arm_mean,
        "saving_s": c.saving_s,
        **_ci("saving_ci", c.ci),
        "share_pct": c.share_pct,
        "p_value": c.p_value,
        "method": c.method,
        "n_blocks": c.n_blocks,
        "note": c.note,
    }
