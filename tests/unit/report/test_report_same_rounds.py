"""Issue 26, item 2: one rule on every page. A figure printed beside an interval is computed
from the rounds that interval used (complete blocks when paired); where an all-rounds figure
is also shown, it is labelled as such. The fixture's sweep has a rejected round, so one block
of +ContainerCheckpoint at 50 pods is missing and all-rounds figures differ from the
complete-block ones (the case that printed "16.1 %" beside a 9.8 % paired result)."""

from __future__ import annotations

import html as html_text

import pytest
from sweeps import SweepSpec, build_sweep

from abtest.app.report import build_model
from abtest.report import render_html, render_markdown
from abtest.report.fmt import num
from abtest.report.tidy import to_json
from abtest.report.verdict import describe, markdown_summary
from abtest.stats import regression_decision
from abtest.stats.regress_result import RegressResult
from abtest.store.db import Store

ARM, SIZE, METRIC = "+ContainerCheckpoint", 50, "batch_ready_s"


def test_every_figure_beside_an_interval_comes_from_the_intervals_rounds(store: Store) -> None:
    model = build_model(store, build_sweep(store, SweepSpec()))
    markdown = render_markdown(model)
    html = html_text.unescape(render_html(model))  # apostrophes are entities there

    # The savings table: the means beside the saving are the complete-block ones, and the
    # all-rounds mean, which differs, is labelled "(all ...)".
    c = next(x for x in model.comparisons if (x.arm, x.size, x.metric) == (ARM, SIZE, METRIC))
    assert c.method == "paired" and c.n_pairs < c.n_baseline  # a block is missing
    assert c.savings_s == pytest.approx(c.baseline_mean_matched - c.treatment_mean_matched)
    assert num(c.baseline_mean) != num(c.baseline_mean_matched)
    for text in (markdown, html):
        assert f"{num(c.baseline_mean_matched)} (all {num(c.baseline_mean)})" in text

    # The JSON: the arithmetic percent reduction beside the paired result is made of the
    # same complete blocks; the all-rounds one says so in its name.
    document = to_json(model)
    (j,) = [
        x
        for x in document["comparisons"]
        if (x["arm"], x["size"], x["metric"]) == (ARM, SIZE, METRIC)
    ]
    matched = (c.baseline_mean_matched - c.treatment_mean_matched) / c.baseline_mean_matched
    assert j["pct_reduction_arithmetic"] == pytest.approx(matched * 100)
    everything = (c.baseline_mean - c.treatment_mean) / c.baseline_mean * 100
    assert j["pct_reduction_arithmetic_all_rounds"] == pytest.approx(everything)
    assert j["pct_reduction_arithmetic"] != pytest.approx(everything)

    # The non-additivity note: combined and sum of singles from the same complete blocks as
    # the excess and its interval (so combined - sum == excess), all-rounds ones labelled.
    a = next(x for x in model.attributions if (x.size, x.metric) == (SIZE, METRIC))
    na = a.non_additivity
    assert na is not None and na.method == "paired"
    assert na.combined_saving_s - na.sum_of_singles_s == pytest.approx(na.excess_s)
    assert num(na.sum_of_singles_all_rounds_s) != num(na.sum_of_singles_s)
    same = (
        f"from the same complete blocks: combined {num(na.combined_saving_s)} s, "
        f"sum of singles {num(na.sum_of_singles_s)} s (all rounds, not the interval's: "
        f"combined {num(na.combined_saving_all_rounds_s)} s, sum of singles "
        f"{num(na.sum_of_singles_all_rounds_s)} s)"
    )
    assert same in markdown and same in html

    # The regression gate's text: the means beside the slowdown are the geometric means of
    # the complete blocks (their ratio is the slowdown), all-rounds means labelled.
    rounds = model.rounds[model.rounds["included"]]
    d = regression_decision(
        rounds, reference="baseline", candidate=ARM, size=SIZE, metric=METRIC, margin_pct=5.0
    )
    assert d.method == "paired" and d.n_pairs < d.n_reference
    assert (d.candidate_gm / d.reference_gm - 1) * 100 == pytest.approx(d.slowdown_pct)
    text = describe(d)
    assert (
        f"candidate {d.candidate_gm:.3f} s vs reference {d.reference_gm:.3f} s "
        f"(geometric means, {d.n_pairs} complete blocks)"
    ) in text
    assert (
        f"all rounds (not the interval's): candidate {d.candidate_mean:.3f} s vs reference "
        f"{d.reference_mean:.3f} s" in text
    )
    result = RegressResult(
        verdict=d.verdict, source="test", run_id=None, looks=1, max_looks=1, blocks=5,
        decisions=(d,),
    )  # fmt: skip
    assert f"| {d.reference_gm:.3f} | {d.candidate_gm:.3f} | {d.slowdown_pct:+.1f} % |" in (
        markdown_summary(result)
    )


def test_the_gate_shows_its_sensitivity_as_such_not_as_a_bound(store: Store) -> None:
    """Issue 26, item 3, in `regress`: the MDE of the look, worded as the run's sensitivity."""
    model = build_model(store, build_sweep(store, SweepSpec()))
    rounds = model.rounds[model.rounds["included"]]
    d = regression_decision(
        rounds, reference="baseline", candidate=ARM, size=SIZE, metric=METRIC, margin_pct=5.0
    )
    assert d.slowdown_ci is not None and d.mde_pct > 0
    assert f"this look could detect {d.mde_pct:.1f} % (80 % power)" in describe(d)
    result = RegressResult(
        verdict=d.verdict, source="test", run_id=None, looks=1, max_looks=1, blocks=5,
        decisions=(d,),
    )  # fmt: skip
    summary = markdown_summary(result)
    assert "| could detect |" in summary and "not a bound on the slowdown" in summary
    assert f"| {d.mde_pct:.1f} % |" in summary
    assert result.to_dict()["decisions"][0]["mde_pct"] == pytest.approx(d.mde_pct)
