"""The report's reference views from a stored run (issue 13 parts 1 and 5): the runtime x settings
table appears for a run crossing one pod-spec factor with kubelet settings (and only then), and
"where the time went" appears for every arm vs baseline, in Markdown, HTML, CSV and JSON."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sweeps import SweepSpec, build_sweep

from abtest.analysis.report_model import ReportModel
from abtest.app.report import build_model
from abtest.report import build_tables, render_html, render_markdown
from abtest.report.tidy import frames, to_json
from abtest.report.writer import write_report
from abtest.store.db import Store

FACTORS = ("crun", "speedups")
TWO_WAY = SweepSpec(
    run_id="sweep-20251201-runtime",
    factors=FACTORS,
    arms=(
        ("baseline", ()),
        ("+crun", ("crun",)),
        ("+speedups", ("speedups",)),
        ("combined", FACTORS),
    ),
    effects={"crun": 0.9, "speedups": 0.6},
    blocks=5,
    sizes=(20, 50),
    design="factorial",
    warmup=None,
    rejected=None,
)


def _store_pod_settings(store: Store, run_id: str) -> None:
    """What the sweep stores for an arm's pod part: its runtime class beside its settings."""
    for name, on in TWO_WAY.arms:
        settings = {"kubeAPIQPS": 200 if "speedups" in on else 50}
        settings["pod.runtimeClassName"] = "crun" if "crun" in on else "runc"  # type: ignore[assignment]
        store.update(
            "arms", {"run_id": run_id, "name": name}, {"settings_json": json.dumps(settings)}
        )


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReportModel]:
    """Built once for the module (about 8 s on 2 cores): the tests only read it, and those
    that vary it make copies (dataclasses.replace)."""
    store = Store(tmp_path_factory.mktemp("twoway") / "results.sqlite")
    run_id = build_sweep(store, TWO_WAY)
    _store_pod_settings(store, run_id)
    yield build_model(store, run_id)
    store.close()


def test_the_pod_spec_factor_and_its_levels_come_from_the_stored_arms(
    model: ReportModel,
) -> None:
    assert model.pod_factor is not None
    assert (model.pod_factor.name, model.pod_factor.off, model.pod_factor.on) == (
        "crun",
        "runc",
        "crun",
    )
    t = model.two_way
    assert t is not None
    assert t.levels == ("runc", "crun") and t.settings == ("speedups",) and t.sizes == (20, 50)
    # the stored effects come back: speedups x0.6 at both runtimes, so a ~40 % reduction
    for level in t.levels:
        for size in t.sizes:
            c = t.saving(level, size)
            assert c is not None and c.method == "paired" and c.n_pairs == 5
            assert c.pct_ci is not None and c.pct_ci[0] > 20.0
    # ... and no interaction in the data: the ratio of ratios interval holds 1
    for i in t.interactions:
        assert i.ratio_ci is not None and i.ratio_ci[0] < 1.0 < i.ratio_ci[1]


def test_the_two_way_table_has_the_reference_shape(model: ReportModel) -> None:
    tables = build_tables(model)
    cells, savings, interaction = tables.two_way
    assert cells.columns == (
        "Runtime",
        "20 pods without",
        "20 pods with",
        "50 pods without",
        "50 pods with",
    )
    assert [row[0] for row in cells.rows] == ["runc", "crun"]
    assert all(re.fullmatch(r"\d+\.\d{3} \[\d+\.\d{3}, \d+\.\d{3}\]", c) for c in cells.rows[0][1:])
    assert [(r[0], r[1]) for r in savings.rows] == [
        ("20", "runc"),
        ("20", "crun"),
        ("50", "runc"),
        ("50", "crun"),
    ]
    assert [r[0] for r in interaction.rows] == ["20", "50"]
    assert all("includes 1" in r[-1] for r in interaction.rows)


def test_every_format_carries_the_reference_views(model: ReportModel, tmp_path: Path) -> None:
    markdown = render_markdown(model)
    html = render_html(model)
    for text in (markdown, html):
        assert "crun x settings: the reference table" in text
        assert "The saving of speedups per crun level" in text
        assert "Does the saving depend on crun?" in text
        assert "Where the time went: +speedups vs baseline" in text
    assert 'href="#sec-two-way"' in html and 'href="#sec-time-went"' in html

    tidy = frames(model)
    assert set(tidy) >= {"two_way", "two_way_savings", "two_way_interaction", "where_time_went"}
    assert len(tidy["two_way"]) == 2 * 2 * 2  # levels x settings x sizes
    went = tidy["where_time_went"]
    # every stage is in the CSV, the report shows the top ones only
    assert set(went["kind"]) == {"batch", "phase", "stage"}
    document = to_json(model)
    assert document["two_way"]["levels"] == ["runc", "crun"]
    assert len(document["where_time_went"]) == 3 * 2  # arms x sizes
    json.dumps(document, allow_nan=False)

    written = {p.name for p in write_report(model, tmp_path)}
    assert {"two_way.csv", "where_time_went.csv", "report.md", "report.html"} <= written


def test_where_the_time_went_ranks_by_share_of_a_clear_saving(model: ReportModel) -> None:
    went = [w for w in model.time_went if w.arm == "+speedups" and w.size == 50]
    assert len(went) == 1
    w = went[0]
    assert w.clear and w.batch.savings_s > 0
    shares = [c.share_pct for c in w.phases[1:]]
    assert all(s is not None for s in shares)
    assert shares == sorted(shares, reverse=True)  # type: ignore[type-var]
    # the fixture's phases are fixed fractions of each pod's latency: the sandbox phase is the
    # largest (0.4 of it), so it leads; the latency is their sum
    assert w.phases[0].item == "latency" and w.phases[1].item == "sandbox"
    assert sum(c.saving_s for c in w.phases[1:]) == pytest.approx(w.phases[0].saving_s)
    for c in (*w.phases, *w.stages):
        assert c.ci is not None and c.method == "paired" and c.n_blocks == 5


def test_no_table_without_a_pod_spec_factor(store: Store) -> None:
    model = build_model(store, build_sweep(store, SweepSpec()))
    assert model.two_way is None and model.pod_factor is None
    assert build_tables(model).two_way == ()
    assert "the reference table" not in render_markdown(model)
    assert "two_way" not in frames(model)
    # where the time went is there for every run with a baseline
    assert {w.arm for w in model.time_went} == {
        "+kubeAPIQPS",
        "+ContainerCheckpoint",
        "+KubeletPodResourcesGet",
        "combined",
    }


def test_a_design_missing_the_settings_only_arm_says_why(store: Store) -> None:
    spec = SweepSpec(
        run_id="no-settings-arm",
        factors=FACTORS,
        arms=(("baseline", ()), ("+crun", ("crun",)), ("combined", FACTORS)),
        effects={"speedups": 0.6},
        warmup=None,
        rejected=None,
    )
    run_id = build_sweep(store, spec)
    _store_pod_settings(store, run_id)
    model = build_model(store, run_id)
    assert model.two_way is None
    assert any("no crun x settings table" in n and "speedups" in n for n in model.notes)


def test_one_block_renders_without_intervals(store: Store) -> None:
    spec = SweepSpec(**{**TWO_WAY.__dict__, "run_id": "one-block", "blocks": 1})
    run_id = build_sweep(store, spec)
    _store_pod_settings(store, run_id)
    model = build_model(store, run_id)
    tables = build_tables(model)
    cells, savings, interaction = tables.two_way
    assert all("(n too small)" in c for row in cells.rows for c in row[1:])
    assert all("n too small" in r[4] for r in savings.rows)
    assert all(r[1].endswith("(n too small)") for r in interaction.rows)
    for table in tables.time_went:
        assert "[" not in "".join(row[5] for row in table.rows)  # no interval anywhere
        assert all(row[6] == "\u2013" for row in table.rows)  # and no share


CATALOG = """\
catalog: twoway-test
description: a runtime factor and kubelet settings
factors:
  - name: crun
    kind: runtime_class
    on: crun
    off: runc
    summary: the crun runtime handler
  - name: speedups
    kind: kubelet_settings
    on: {kubeAPIQPS: 200, kubeAPIBurst: 400}
    off: {kubeAPIQPS: 50, kubeAPIBurst: 100}
    summary: a faster API client
"""


def test_a_run_without_stored_pod_settings_falls_back_to_its_catalog(
    store: Store, tmp_path: Path
) -> None:
    catalog = tmp_path / "twoway.yaml"
    catalog.write_text(CATALOG)
    run_id = build_sweep(store, TWO_WAY)  # arms store feature gates only, no pod part
    store.update("runs", {"id": run_id}, {"catalog_name": str(catalog)})
    model = build_model(store, run_id)
    assert model.two_way is not None and model.two_way.levels == ("runc", "crun")
    assert model.pod_factor is not None and "as it is now" in model.pod_factor.source
    assert any("pod-spec factors read from the catalog" in n for n in model.notes)


def test_a_catalog_that_is_gone_gives_no_table_and_no_error(store: Store) -> None:
    run_id = build_sweep(store, TWO_WAY)
    store.update("runs", {"id": run_id}, {"catalog_name": "no-such-catalog"})
    model = build_model(store, run_id)
    assert model.two_way is None and model.pod_factor is None
    assert model.time_went  # the rest of the report is there


def test_two_pod_spec_factors_give_no_table_and_say_so(store: Store) -> None:
    factors = ("crun", "template")
    spec = SweepSpec(
        run_id="two-pod-factors",
        factors=factors,
        arms=(
            ("baseline", ()),
            ("+crun", ("crun",)),
            ("+template", ("template",)),
            ("combined", factors),
        ),
        effects={},
        warmup=None,
        rejected=None,
    )
    run_id = build_sweep(store, spec)
    for name, on in spec.arms:
        settings = {
            "pod.runtimeClassName": "crun" if "crun" in on else "runc",
            "pod.annotations.example.com/mode": "template" if "template" in on else "cold",
        }
        store.update(
            "arms", {"run_id": run_id, "name": name}, {"settings_json": json.dumps(settings)}
        )
    model = build_model(store, run_id)
    assert model.two_way is None
    assert any("2 pod-spec factors (crun, template)" in n for n in model.notes)


def test_the_pod_part_the_plan_stored_is_read_too(store: Store) -> None:
    """The sweep keeps each arm's pod part in the run's plan (``arm_pods``)."""
    run_id = build_sweep(store, TWO_WAY)  # arms store feature gates only
    pods = {
        name: {"pod.runtimeClassName": "crun" if "crun" in on else "runc"}
        for name, on in TWO_WAY.arms
    }
    plan = {"blocks": TWO_WAY.blocks, "arm_pods": pods}
    store.update("runs", {"id": run_id}, {"plan_json": json.dumps(plan)})
    model = build_model(store, run_id)
    assert model.pod_factor is not None and model.pod_factor.source == "the run's stored pod parts"
    assert model.two_way is not None and model.two_way.levels == ("runc", "crun")
    assert not any("catalog" in n for n in model.notes)


def test_key_results_state_the_per_runtime_saving_and_its_dependence(model: ReportModel) -> None:
    lines = [h for h in build_tables(model).headlines if h.startswith("speedups at ")]
    assert len(lines) == 2  # one per size
    first = lines[0]
    assert first.startswith("speedups at 20 pods: reduction +")
    assert "% on runc and +" in first and "% on crun [95% CI]" in first
    assert "ratio of ratios 1.0" in first or "ratio of ratios 0.9" in first
    assert first.endswith("no clear dependence (the interval includes 1).")
    assert first in render_markdown(model)


def test_phases_that_do_not_add_up_are_said_so(store: Store) -> None:
    run_id = build_sweep(store, TWO_WAY)
    _store_pod_settings(store, run_id)
    first = store.query("SELECT round_id, name FROM pods ORDER BY round_id LIMIT 1")[0]
    store.update("pods", {"round_id": first[0], "name": first[1]}, {"ready_to_start_s": None})
    tables = build_tables(build_model(store, run_id))
    notes = " ".join(n for t in tables.time_went for n in t.notes)
    assert "the phases do not add up to the latency" in notes
    model_ok = build_model(store, build_sweep(store, SweepSpec()))
    ok_notes = " ".join(n for t in build_tables(model_ok).time_went for n in t.notes)
    assert "the phases do not add up" not in ok_notes


def test_key_results_name_a_resolved_mechanism_when_the_batch_time_is_not(
    model: ReportModel,
) -> None:
    import dataclasses

    from abtest.report.tables_reference import time_went_headlines

    # every batch saving of this fixture is clear: no mechanism headline, the savings say it
    assert all(w.clear for w in model.time_went) and time_went_headlines(model) == ()
    w = next(w for w in model.time_went if w.arm == "+speedups" and w.size == 50)
    assert w.resolved, "the fixture's phases move with the arm"
    unclear = dataclasses.replace(model, time_went=(dataclasses.replace(w, clear=False),))
    (line,) = time_went_headlines(unclear)
    top, _ = w.resolved[0]
    assert line.startswith(
        "+speedups at 50 pods, where the time went (batch ready time not resolved): "
    )
    assert f"p (Holm over its {w.n_items} phases and stages)" in line
    assert line.count("ms less") + line.count("ms more") == min(2, len(w.resolved))
    assert f"{top.baseline_mean * 1000:.1f} -> {top.arm_mean * 1000:.1f} ms" in line
    assert f"- {line}\n" in render_markdown(unclear)
