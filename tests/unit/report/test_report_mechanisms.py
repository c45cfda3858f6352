"""The patch series' mechanism counters in the report: per arm and size, each counter's delta
per pod (median over the analysed rounds that have it). A gate whose batch time did not move
still shows whether its mechanism engaged; an arm on a build without the counters gets no
column, not zeros it never measured."""

from __future__ import annotations

import pytest
from sweeps import build_sweep

from abtest.analysis.report_model import ReportModel
from abtest.app.report import build_model
from abtest.report import build_tables, render_markdown
from abtest.report.tidy import frames
from abtest.store.db import Store

BUILT = "kubelet_cgroup_manager_libcontainer_managers_built_total"
UPDATES = "kubelet_qos_cgroup_updates_total"


def _add_counters(store: Store, run_id: str) -> None:
    """The baseline runs a build without the counters (no rows). Elsewhere per pod: 3 managers
    built for updates (0 on +ContainerCheckpoint, standing in for the reuse gate's arm), 1 QoS
    update; warm-up and rejected rounds 50 per pod (must not count)."""
    rounds = store.rounds_frame(run_id)
    for r in rounds.to_dict(orient="records"):
        arm, size = str(r["arm"]), int(r["size"])
        if arm == "baseline":
            continue
        analysed = r["accepted"] == 1 and r["warmup"] == 0
        built = (0 if arm == "+ContainerCheckpoint" else 3) if analysed else 50
        rows = [(BUILT, 'operation_type="update"', built * size), (UPDATES, "", size)]
        store.insert_many(
            "metric_deltas",
            [
                {"round_id": int(r["id"]), "metric": m, "labels": labels, "delta_sum": None,
                 "delta_count": float(n)}
                for m, labels, n in rows
            ],
        )  # fmt: skip


@pytest.fixture(scope="module")
def model(module_store: Store) -> ReportModel:
    run_id = build_sweep(module_store)
    _add_counters(module_store, run_id)
    return build_model(module_store, run_id)


def test_counters_are_per_pod_medians_and_absent_where_the_build_has_none(
    model: ReportModel,
) -> None:
    rates = {(r.metric, r.arm, r.size): r.per_pod_median for r in model.mechanisms}
    for size in (20, 50):
        assert rates[(BUILT, "+kubeAPIQPS", size)] == pytest.approx(3.0)
        assert rates[(BUILT, "+ContainerCheckpoint", size)] == 0.0  # engaged: none built
        assert rates[(UPDATES, "combined", size)] == pytest.approx(1.0)
        assert (BUILT, "baseline", size) not in rates  # never measured, not zero
    analysed = model.rounds[model.rounds["included"]]
    for r in model.mechanisms:
        mine = analysed[(analysed["arm"] == r.arm) & (analysed["size"] == r.size)]
        assert r.n_rounds == len(mine) > 0


def test_the_table_renders_with_a_dash_for_an_arm_without_counters(model: ReportModel) -> None:
    table = build_tables(model).mechanisms
    assert table is not None and table.columns[:3] == ("Counter", "Labels", "Pods")
    row = next(r for r in table.rows if r[0] == BUILT.removeprefix("kubelet_") and r[2] == "20")
    by_arm = dict(zip(table.columns[3:], row[3:], strict=True))
    assert by_arm["+kubeAPIQPS"] == "3.00" and by_arm["+ContainerCheckpoint"] == "0.00"
    assert "baseline" not in by_arm  # its build has no counters: no column, not zeros
    assert "## Mechanism counters per pod" in render_markdown(model)
    assert "mechanism_counters_per_pod" in frames(model)


def test_no_table_for_a_run_without_the_counters(store: Store) -> None:
    model = build_model(store, build_sweep(store))
    assert model.mechanisms == () and build_tables(model).mechanisms is None
