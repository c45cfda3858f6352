"""The report model from a fixture results database: every number traces back to the stored pods.

The database is ``build_sweep``'s (tests/sweeps.py): a synthetic but realistic sweep stored the
way the sweep stores one. One warm-up round and one rejected round carry absurd times, so that
letting either into the statistics would show.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest
from sweeps import KNOWN, PLAYBOOK, SweepSpec, build_sweep

from abtest.analysis.report_model import ArmMetric, ReportModel
from abtest.app.report import build_model
from abtest.errors import UserError
from abtest.report import build_tables, render_markdown
from abtest.stats import nearest_rank
from abtest.store.db import Store


@pytest.fixture()
def sweep(store: Store) -> tuple[Store, str]:
    return store, build_sweep(store)


@pytest.fixture(scope="module")
def model(module_store: Store) -> ReportModel:
    return build_model(module_store, build_sweep(module_store))


def _cell(model: ReportModel, arm: str, size: int, metric: str) -> ArmMetric:
    cell = model.arm_metric(arm, size, metric)
    assert cell is not None, (arm, size, metric)
    return cell


def _pods(store: Store, run_id: str) -> pd.DataFrame:
    pods = store.pods_frame(run_id)
    pods["latency"] = pods["ready_s"] - pods["sent_s"]
    return pods


def _recomputed(store: Store, run_id: str) -> pd.DataFrame:
    """Per round, from the stored pods alone: batch ready time and nearest-rank P95."""
    pods = _pods(store, run_id)
    rows = []
    for round_id, group in pods.groupby("round_id"):
        rows.append(
            {
                "round_id": round_id,
                "arm": group["arm"].iloc[0],
                "size": int(group["size"].iloc[0]),
                "analysed": bool(group["accepted"].iloc[0] == 1 and group["warmup"].iloc[0] == 0),
                "batch_ready_s": float(group["ready_s"].max() - group["sent_s"].min()),
                "p95_s": nearest_rank(group["latency"], 95),
            }
        )
    return pd.DataFrame(rows)


def test_stored_summaries_recompute_from_the_pods(sweep: tuple[Store, str]) -> None:
    store, run_id = sweep
    rounds = store.rounds_frame(run_id).set_index("id")
    again = _recomputed(store, run_id).set_index("round_id")
    assert len(again) == len(rounds) == 5 * 5 * 2 + 1  # + the warm-up round
    assert np.allclose(again["p95_s"], rounds.loc[again.index, "p95_s"])
    assert np.allclose(again["batch_ready_s"], rounds.loc[again.index, "batch_ready_s"])


def test_report_numbers_are_the_per_pod_numbers(
    sweep: tuple[Store, str], model: ReportModel
) -> None:
    store, run_id = sweep
    again = _recomputed(store, run_id)
    analysed = again[again["analysed"]]
    markdown = render_markdown(model)
    for _, group in analysed.groupby(["arm", "size"]):
        arm, size = str(group["arm"].iloc[0]), int(group["size"].iloc[0])
        for metric in ("batch_ready_s", "p95_s"):
            cell = _cell(model, arm, size, metric)
            assert cell.n == len(group)
            assert cell.mean == pytest.approx(group[metric].mean(), rel=1e-12)
            assert cell.median == pytest.approx(group[metric].median(), rel=1e-12)
            assert cell.ci is not None and cell.ci[0] < cell.mean < cell.ci[1]
            assert f"{group[metric].mean():.3f} [" in markdown
    # The comparisons' baseline and arm means are the same per-pod numbers.
    for c in model.comparisons_for("p95_s"):
        base = analysed[(analysed["arm"] == "baseline") & (analysed["size"] == c.size)]
        treat = analysed[(analysed["arm"] == c.arm) & (analysed["size"] == c.size)]
        assert c.baseline_mean == pytest.approx(base["p95_s"].mean())
        assert c.treatment_mean == pytest.approx(treat["p95_s"].mean())


def test_known_effect_has_the_right_sign_and_nulls_straddle_zero(model: ReportModel) -> None:
    for size in (20, 50):
        by_arm = {c.arm: c for c in model.comparisons_for("batch_ready_s") if c.size == size}
        assert set(by_arm) == {a for a, _ in SweepSpec().arms} - {"baseline"}
        for slow in (KNOWN, "combined"):
            c = by_arm[slow]
            assert c.pct_ci is not None and c.savings_ci is not None
            assert c.pct_reduction == pytest.approx(-50.0, abs=10.0)  # 1.5x slower
            assert c.pct_ci[1] < 0 and c.savings_ci[1] < 0
            assert c.p_adjusted is not None and c.p_adjusted < 0.05
        for null in ("+ContainerCheckpoint", "+KubeletPodResourcesGet"):
            c = by_arm[null]
            assert c.pct_ci is not None and c.pct_ci[0] < 0 < c.pct_ci[1], (null, size, c.pct_ci)
    assert any("+kubeAPIQPS at 50 pods" in line for line in build_tables(model).headlines)


def test_warmup_and_rejected_rounds_are_counted_but_not_analysed(model: ReportModel) -> None:
    assert _cell(model, "baseline", 20, "batch_ready_s").n == 5
    assert _cell(model, "+ContainerCheckpoint", 50, "p95_s").n == 4
    c = next(
        c for c in model.comparisons_for("batch_ready_s", "+ContainerCheckpoint") if c.size == 50
    )
    assert (c.n_baseline, c.n_treatment, c.n_pairs) == (5, 4, 4)
    rows = {(r.arm, r.size): r for r in model.acceptance}
    warm = rows[("baseline", 20)]
    assert (warm.rounds, warm.warmup, warm.accepted, warm.failed) == (6, 1, 5, 0)
    bad = rows[("+ContainerCheckpoint", 50)]
    assert (bad.rounds, bad.warmup, bad.accepted, bad.failed, bad.restarts) == (5, 0, 4, 1, 1)
    assert bad.reasons == (("container restarted (1)", 1),)
    assert sum(r.rounds for r in model.acceptance) == 51
    assert (
        sum(r.sandbox_failures for r in model.acceptance)
        == int(model.rounds["sandbox_failures"].sum())
        > 0
    )
    assert {e.why for e in model.excluded} == {"warm-up", "container restarted (1)"}
    table = build_tables(model).acceptance
    assert table.rows[-1][:8] == ("total", "", "51", "1", "49", "1", "1", "0")


def test_attribution_per_size(model: ReportModel) -> None:
    batch = [a for a in model.attributions if a.metric == "batch_ready_s"]
    assert [a.size for a in batch] == [20, 50]
    for a in batch:
        assert a.combined_arm == "combined"
        assert a.share_method == "approximate"  # singles + combined only: no full factorial
        known = next(f for f in a.factors if f.factor == "kubeAPIQPS")
        assert known.alone is not None and known.alone.savings_s < 0
        assert known.share_pct is not None and known.share_pct > 50
        assert a.non_additivity is not None and a.non_additivity.excess_ci is not None
    titles = [t.title for t in build_tables(model).attribution]
    assert "Attribution, batch ready time, 20 pods" in titles


def test_stage_deltas_restarts_and_environment(
    sweep: tuple[Store, str], model: ReportModel
) -> None:
    store, run_id = sweep
    deltas = store.metric_deltas_frame(run_id)
    deltas = deltas[(deltas["accepted"] == 1) & (deltas["warmup"] == 0)]
    sandbox = deltas[deltas["labels"] == 'operation_type="run_podsandbox"']
    for stage in (s for s in model.stages if s.labels == 'operation_type="run_podsandbox"'):
        rows = sandbox[sandbox["arm"] == stage.arm]
        assert stage.n_rounds == len(rows)
        assert stage.median_s == pytest.approx((rows["delta_sum"] / rows["delta_count"]).median())
    visits = store.visits_frame(run_id)
    for r in model.restarts:
        mine = visits[visits["arm"] == r.arm]
        assert (r.visits, r.applied, r.verified, r.errors) == (5, 5, 5, 0)
        assert r.healthz_median_s == pytest.approx(mine["restart_to_healthz_s"].median())
    env = dict(model.environment)
    assert env["kubelet_version"] == "v1.34.4"
    assert env["playbook sha256"] == hashlib.sha256(PLAYBOOK.encode()).hexdigest()
    assert env["seed"] == "20251201" and env["node"] == "lab-node"
    assert len(model.method) == 3
    # the node's cores and each size's load per core (the reference: 150 pods on 64 cores)
    assert model.method[-1] == (
        "Load: the node has 2 CPU cores (capacity); pods per core: 20 pods = 10, 50 pods = 25."
    )


def test_unknown_run_and_unknown_baseline(sweep: tuple[Store, str]) -> None:
    store, run_id = sweep
    with pytest.raises(UserError, match="no run 'nope'"):
        build_model(store, "nope")
    with pytest.raises(UserError, match="no arm 'other'"):
        build_model(store, run_id, baseline="other")


def test_too_few_rounds_says_n_too_small(store: Store) -> None:
    spec = SweepSpec(
        run_id="tiny",
        factors=("kubeAPIQPS",),
        arms=(("baseline", ()), ("+kubeAPIQPS", ("kubeAPIQPS",))),
        blocks=1,
        sizes=(10,),
        warmup=None,
        rejected=None,
    )
    model = build_model(store, build_sweep(store, spec))
    (c,) = model.comparisons_for("batch_ready_s")
    assert c.pct_ci is None and c.p_value is None
    markdown = render_markdown(model)
    assert "(n too small)" in markdown
    assert model.attributions == () and model.combined_arm is None


def test_factorial_design_gets_effects(store: Store) -> None:
    two = ("kubeAPIQPS", "ContainerCheckpoint")
    spec = SweepSpec(
        run_id="factorial",
        factors=two,
        arms=(
            ("baseline", ()),
            ("+kubeAPIQPS", ("kubeAPIQPS",)),
            ("+ContainerCheckpoint", ("ContainerCheckpoint",)),
            ("combined", two),
        ),
        design="factorial",
        blocks=4,
        sizes=(20,),
        warmup=None,
        rejected=None,
    )
    model = build_model(store, build_sweep(store, spec))
    (effects, _p95) = model.factorial
    main = {e.term: e for e in effects.main}
    assert main[("kubeAPIQPS",)].pct_ci is not None
    assert main[("kubeAPIQPS",)].pct_ci[1] < 0  # slower: negative reduction
    assert [a.share_method for a in model.attributions] == ["shapley", "shapley"]
    tables = build_tables(model)
    assert [t.key for t in tables.factorial] == ["factorial-batch-ready-20", "factorial-p95-20"]
    assert "kubeAPIQPS x ContainerCheckpoint" in tables.factorial[0].rows[-1][0]


def test_plain_batch_run_without_baseline(store: Store) -> None:
    spec = SweepSpec(
        run_id="batch-1",
        factors=(),
        arms=(("as-is", ()),),
        blocks=2,
        sizes=(10,),
        warmup=None,
        rejected=None,
    )
    run_id = build_sweep(store, spec)
    store.update("runs", {"id": run_id}, {"kind": "batch", "design": None})
    model = build_model(store, run_id)
    assert model.baseline is None and model.comparisons == ()
    assert "no baseline arm" in " ".join(model.notes)
    assert "as-is" in render_markdown(model)


def test_environment_from_the_batch_engines_nested_probe(store: Store) -> None:
    run_id = build_sweep(store)
    probe = {
        "tool_version": "0.1.0",
        "git": {"commit": "abc1234", "dirty": True},
        "python": "3.11.2",
        "node": {
            "node_name": "lab-node",
            "kernel": "6.1.0-28-amd64",
            "os_image": "Debian GNU/Linux 12 (bookworm)",
            "kubelet_version": "v1.34.4",
            "container_runtime": "containerd://1.7.28",
            "capacity": {"cpu": "2", "memory": "4022Mi"},
            "labels": {"kubernetes.io/hostname": "lab-node"},
        },
        "api_server": {"git_version": "v1.34.4", "go_version": "go1.24"},
        "nodes": {"lab-node": {"node_name": "lab-node"}},
    }
    store.update("runs", {"id": run_id}, {"env_json": probe})
    env = dict(build_model(store, run_id).environment)
    assert env["node"] == "lab-node"
    assert env["containerd_version"] == "containerd://1.7.28"
    assert env["apiserver_version"] == "v1.34.4" and env["api_server.go_version"] == "go1.24"
    assert (env["node_cpu"], env["node_memory"]) == ("2", "4022Mi")
    assert env["git_revision"] == "abc1234" and env["git_revision dirty"] == "yes"
    assert env["python"] == "3.11.2"
    assert not any(key.startswith(("node.labels", "nodes")) for key in env)


@pytest.mark.parametrize(
    ("quantity", "cores"),
    [("2", 2.0), ("64", 64.0), ("2500m", 2.5), ("1.5", 1.5), ("0", None), ("", None), ("x", None),
     (None, None), (["2"], None)],
)  # fmt: skip
def test_node_cores_read_as_kubernetes_cpu_quantities(
    quantity: object, cores: float | None
) -> None:
    from abtest.analysis.report_model import _node_cores

    assert _node_cores({"node": {"capacity": {"cpu": quantity}}}) == cores
    assert _node_cores({"node_cpu": quantity}) == cores
