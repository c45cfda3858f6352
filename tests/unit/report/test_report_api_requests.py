"""The kubelet's API requests per pod in the report: client-go's request counter per method and
code, per arm and size, over the analysed rounds whose metrics were scraped; a (method, code)
a scraped round did not use counts as 0, a round without a scrape is left out. It is how a
report shows what a setting takes off the API server (events are POSTs)."""

from __future__ import annotations

import pytest
from sweeps import build_sweep

from abtest.analysis.report_model import ReportModel
from abtest.app.report import build_model
from abtest.report import build_tables, render_markdown
from abtest.report.tidy import frames
from abtest.store.db import Store

METRIC = "rest_client_requests_total"


def _labels(code: str, method: str) -> str:
    return f'code="{code}",host="127.0.0.1:6443",method="{method}"'


def _add_requests(store: Store, run_id: str) -> None:
    """Per pod, every analysed round: 2 GET and 2 PATCH; POST 4 per pod on the baseline and
    1 elsewhere, split over two hosts on the baseline; warm-up and rejected rounds 100 POST per
    pod (must not count); +kubeAPIQPS at 50 pods in block 1: 0.5 DELETE per pod; the combined
    arm's block-1 rounds have no scrape at all (left out, not 0)."""
    rounds = store.rounds_frame(run_id)
    for r in rounds.to_dict(orient="records"):
        rid, arm, size = int(r["id"]), str(r["arm"]), int(r["size"])
        if arm == "combined" and r["block"] == 1:
            continue
        analysed = r["accepted"] == 1 and r["warmup"] == 0
        post = (4 if arm == "baseline" else 1) if analysed else 100
        rows = [
            (_labels("200", "GET"), 2 * size),
            (_labels("200", "PATCH"), 2 * size),
        ]
        if arm == "baseline":
            rows += [
                (_labels("201", "POST"), post * size // 2),
                ('code="201",host="10.0.0.1:6443",method="POST"', post * size // 2),
            ]
        else:
            rows.append((_labels("201", "POST"), post * size))
        if arm == "+kubeAPIQPS" and size == 50 and r["block"] == 1:
            rows.append((_labels("200", "DELETE"), size // 2))
        store.insert_many(
            "metric_deltas",
            [
                {
                    "round_id": rid,
                    "metric": METRIC,
                    "labels": labels,
                    "delta_sum": None,
                    "delta_count": float(n),
                }
                for labels, n in rows
            ],
        )


@pytest.fixture(scope="module")
def model(module_store: Store) -> ReportModel:
    run_id = build_sweep(module_store)
    _add_requests(module_store, run_id)
    return build_model(module_store, run_id)


def _rate(model: ReportModel, method: str, code: str, arm: str, size: int) -> float:
    found = [
        r
        for r in model.api_requests
        if (r.method, r.code, r.arm, r.size) == (method, code, arm, size)
    ]
    assert len(found) == 1, (method, code, arm, size, found)
    return found[0].per_pod_median


def test_rates_are_per_pod_medians_of_the_scraped_analysed_rounds(model: ReportModel) -> None:
    for size in (20, 50):
        # two hosts summed; warm-up and rejected rounds (100 per pod) left out
        assert _rate(model, "POST", "201", "baseline", size) == pytest.approx(4.0)
        assert _rate(model, "POST", "201", "+ContainerCheckpoint", size) == pytest.approx(1.0)
        assert _rate(model, "GET", "200", "combined", size) == pytest.approx(2.0)
        # a method no round of the arm used: 0, not missing
        assert _rate(model, "DELETE", "200", "baseline", size) == 0.0
    # one block of five with 0.5 per pod: the median round has none
    assert _rate(model, "DELETE", "200", "+kubeAPIQPS", 50) == 0.0
    analysed = model.rounds[model.rounds["included"]]
    for r in model.api_requests:
        mine = analysed[(analysed["arm"] == r.arm) & (analysed["size"] == r.size)]
        if r.arm == "combined":  # its block-1 rounds were not scraped
            mine = mine[mine["block"] != 1]
        assert len(mine) > 0 and r.n_rounds == len(mine)


def test_the_table_renders_arms_across_and_stays_out_of_the_stages(model: ReportModel) -> None:
    table = build_tables(model).api_requests
    assert table is not None
    assert table.columns[:3] == ("Method", "Code", "Pods")
    assert list(table.columns[3:]) == list(model.arm_names())
    post = next(row for row in table.rows if tuple(row[:3]) == ("POST", "201", "20"))
    assert post[3 + model.arm_names().index("baseline")] == "4.00"
    markdown = render_markdown(model)
    assert "## Kubelet API requests per pod" in markdown
    # a counter has no mean per observation: it is no kubelet stage
    assert not any("rest_client" in s.metric for s in model.stages)
    assert "api_requests_per_pod" in frames(model)


def test_a_run_without_the_counter_has_no_table(store: Store) -> None:
    model = build_model(store, build_sweep(store))
    assert model.api_requests == ()
    assert build_tables(model).api_requests is None
    assert "Kubelet API requests" not in render_markdown(model)
