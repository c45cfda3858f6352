"""Issue 11, items 13, 17 and 18 in the report: the means beside a saving are the ones it was
made of, a missing interval says why, and every Holm-adjusted p says which family it is
adjusted over (the savings table and the attribution table use different families)."""

from __future__ import annotations

import dataclasses
import re

import pandas as pd
import pytest
from sweeps import SweepSpec, build_sweep

from abtest.analysis.report_model import ReportModel
from abtest.app.report import build_model
from abtest.report import build_tables, render_html, render_markdown
from abtest.report.fmt import num
from abtest.report.tidy import frames, to_json
from abtest.stats import Comparison, compare
from abtest.store.db import Store

UNBALANCED = ("+ContainerCheckpoint", 50)  # the fixture's rejected round: 4 pairs of 5 blocks


@pytest.fixture(scope="module")
def model(module_store: Store) -> ReportModel:
    return build_model(module_store, build_sweep(module_store, SweepSpec()))


def _comparison(model: ReportModel, arm: str, size: int, metric: str) -> Comparison:
    return next(
        c for c in model.comparisons_for(metric, arm) if c.size == size and c.metric == metric
    )


def _section(markdown: str, title_start: str) -> str:
    """The text of the first ### table whose title starts with ``title_start``."""
    parts = re.split(r"^### ", markdown, flags=re.M)
    return next(p for p in parts if p.startswith(title_start))


# ---------------------------------------------------------------- item 17


def test_unbalanced_saving_shows_the_means_it_was_made_of(model: ReportModel) -> None:
    c = _comparison(model, *UNBALANCED, "batch_ready_s")
    assert c.method == "paired" and c.n_pairs == 4 and c.n_baseline == 5
    assert c.savings_s == pytest.approx(c.baseline_mean_matched - c.treatment_mean_matched)
    assert num(c.baseline_mean_matched) != num(c.baseline_mean)  # the case that misled

    table = next(t for t in build_tables(model).savings if t.key == "savings-batch-ready")
    row = next(r for r in table.rows if (r[0], r[1]) == ("50", UNBALANCED[0]))
    assert row[2] == f"{num(c.baseline_mean_matched)} (all {num(c.baseline_mean)})"
    assert row[3] == num(c.treatment_mean_matched)  # every treatment round is paired
    assert any("the saving is made of" in n for n in table.notes)

    markdown = render_markdown(model)
    html = render_html(model)
    for text in (markdown, html):
        assert f"{num(c.baseline_mean_matched)} (all {num(c.baseline_mean)})" in text
    document = to_json(model)
    (j,) = [
        x
        for x in document["comparisons"]
        if (x["arm"], x["size"], x["metric"]) == (*UNBALANCED, "batch_ready_s")
    ]
    assert j["baseline_mean_matched"] == pytest.approx(c.baseline_mean_matched)
    assert j["baseline_mean"] == pytest.approx(c.baseline_mean)
    csv = frames(model)["comparisons"]
    assert {"baseline_mean_matched", "treatment_mean_matched", "savings_note"} <= set(csv)


def test_balanced_cells_show_one_mean(model: ReportModel) -> None:
    table = next(t for t in build_tables(model).savings if t.key == "savings-batch-ready")
    row = next(r for r in table.rows if (r[0], r[1]) == ("20", "+kubeAPIQPS"))
    assert "(all" not in row[2] and "(all" not in row[3]


# ---------------------------------------------------------------- item 18


def test_each_holm_p_value_names_its_family(model: ReportModel) -> None:
    # Precondition: a comparison with two different Holm-adjusted p-values in the report.
    (attribution,) = [a for a in model.attributions if (a.size, a.metric) == (50, "batch_ready_s")]
    differ = [
        f.factor
        for f in attribution.factors
        if f.alone is not None
        and f.alone.p_adjusted
        != pytest.approx(_comparison(model, f.alone.arm, 50, "batch_ready_s").p_adjusted)
    ]
    assert differ

    markdown = render_markdown(model)
    savings = _section(markdown, "Batch ready time: savings")
    assert "Holm over the 4 arms vs baseline at each size" in savings
    attribution_text = _section(markdown, "Attribution, batch ready time, 50 pods")
    assert "Holm over the 3 single-factor arms" in attribution_text
    assert "not the savings table's family" in attribution_text
    combined = _section(markdown, "combined (all 3 factors on)")
    assert "Holm over the 4 arms vs baseline" in combined


# ---------------------------------------------------------------- item 13


def test_a_cell_without_an_interval_gives_the_real_reason(model: ReportModel) -> None:
    blocks = [4.0, 4.37, 3.91, 4.13, 4.61]
    flat = pd.DataFrame(  # +kubeAPIQPS exactly 1.1 x baseline in every block
        {
            "arm": ["baseline"] * 5 + ["+kubeAPIQPS"] * 5,
            "size": 20,
            "block": list(range(5)) * 2,
            "batch_ready_s": blocks + [b * 1.1 for b in blocks],
        }
    )
    (c,) = compare(flat, baseline="baseline", metric="batch_ready_s")
    assert c.pct_ci is None and c.savings_ci is not None
    tables = build_tables(dataclasses.replace(model, comparisons=(c,), attributions=()))
    (row,) = next(t for t in tables.savings if t.key == "savings-batch-ready").rows
    assert row[5] == f"{c.pct_reduction:+.1f} (no variation)"
    assert row[4].startswith(f"{c.savings_s:+.3f} [")
    assert "percent reduction: no variation between rounds" in row[-1]
