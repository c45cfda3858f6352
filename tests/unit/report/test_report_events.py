"""Events per pod in the report: per reason and type, per arm and size, over the analysed rounds
only, rounds without an event of a reason counted as 0; a warning the kubelet repeats for every
pod gets a note (the lab's missing cluster DNS was one: 4 MissingClusterDNS per pod)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sweeps import build_sweep

from abtest.analysis.report_model import ReportModel
from abtest.app.report import build_model
from abtest.report import build_tables, render_markdown
from abtest.report.fmt import DASH
from abtest.store.db import Store
from abtest.store.schema import MIGRATIONS, SCHEMA_VERSION


def _add_events(store: Store, run_id: str) -> None:
    """Every round: one Scheduled per pod; baseline rounds: 4 MissingClusterDNS per pod (the
    warm-up and rejected rounds 40, which must not count); +kubeAPIQPS rounds at 50 pods: one
    BackOff per two pods in block 1 only; every round: one untyped (pre-v3) event."""
    rounds = store.rounds_frame(run_id)
    for r in rounds.to_dict(orient="records"):
        rid, arm, size = int(r["id"]), str(r["arm"]), int(r["size"])
        analysed = r["accepted"] == 1 and r["warmup"] == 0
        rows = [{"round_id": rid, "reason": "Scheduled", "type": "Normal", "count": size}]
        if arm == "baseline":
            per_pod = 4 if analysed else 40
            rows.append(
                {
                    "round_id": rid,
                    "reason": "MissingClusterDNS",
                    "type": "Warning",
                    "count": per_pod * size,
                }
            )
        if arm == "+kubeAPIQPS" and size == 50 and r["block"] == 1:
            rows.append({"round_id": rid, "reason": "BackOff", "type": "Warning", "count": 25})
        store.insert_many("events", rows)
        store.insert("events", {"round_id": rid, "reason": "Pulled", "count": size})  # type NULL


@pytest.fixture(scope="module")
def model(module_store: Store) -> ReportModel:
    run_id = build_sweep(module_store)
    _add_events(module_store, run_id)
    return build_model(module_store, run_id)


def _rate(model: ReportModel, reason: str, arm: str, size: int) -> float:
    found = [e for e in model.events if (e.reason, e.arm, e.size) == (reason, arm, size)]
    assert len(found) == 1, (reason, arm, size, found)
    return found[0].per_pod_median


def test_rates_are_per_pod_medians_of_the_analysed_rounds(model: ReportModel) -> None:
    for size in (20, 50):
        assert _rate(model, "MissingClusterDNS", "baseline", size) == pytest.approx(4.0)
        # an arm that never had the warning: 0, not missing
        assert _rate(model, "MissingClusterDNS", "+ContainerCheckpoint", size) == 0.0
        assert _rate(model, "Scheduled", "combined", size) == pytest.approx(1.0)
    # one block of five with 0.5 per pod: the median round has none
    assert _rate(model, "BackOff", "+kubeAPIQPS", 50) == 0.0
    analysed = model.rounds[model.rounds["included"]]
    for e in model.events:
        mine = analysed[(analysed["arm"] == e.arm) & (analysed["size"] == e.size)]
        assert e.n_rounds == len(mine)


def test_types_warnings_first_and_untyped_events_say_so(model: ReportModel) -> None:
    kinds = {e.reason: e.type for e in model.events}
    assert kinds == {
        "MissingClusterDNS": "Warning",
        "BackOff": "Warning",
        "Scheduled": "Normal",
        "Pulled": "",
        "FailedCreatePodSandBox": "",  # the fixture's own (untyped) sandbox failures
    }
    types = [e.type for e in model.events]
    assert types == sorted(types, key=lambda t: t != "Warning")


def test_a_warning_repeated_for_every_pod_is_named_once(model: ReportModel) -> None:
    notes = [n for n in model.notes if "warning events in the median round" in n]
    assert len(notes) == 1  # BackOff (0 in the median round) is no repeated warning
    assert "MissingClusterDNS" in notes[0] and "every pod got 4 " in notes[0]
    assert "baseline" in notes[0]


def test_the_table_renders_arms_across(model: ReportModel) -> None:
    table = build_tables(model).events
    assert table is not None
    assert table.columns[:3] == ("Reason", "Type", "Pods")
    assert list(table.columns[3:]) == [a for a in model.arm_names()]
    first = table.rows[0]
    assert first[0] in ("BackOff", "MissingClusterDNS") and first[1] == "Warning"
    pulled = next(r for r in table.rows if r[0] == "Pulled")
    assert pulled[1] == DASH
    markdown = render_markdown(model)
    assert "## Events per pod" in markdown and "| MissingClusterDNS | Warning | 20 |" in markdown


def test_untyped_events_are_listed_but_get_no_note(store: Store) -> None:
    model = build_model(store, build_sweep(store))
    # the fixture's own events: FailedCreatePodSandBox, stored without a type
    assert {(e.reason, e.type) for e in model.events} == {("FailedCreatePodSandBox", "")}
    assert not any("warning events" in n for n in model.notes)


def test_a_v2_database_gains_event_types_and_keeps_its_events(tmp_path: Path) -> None:
    path = tmp_path / "v2.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[0] + MIGRATIONS[1] + "\nPRAGMA user_version = 2;")
    conn.execute(
        "INSERT INTO runs (id, kind, created_at, status) VALUES ('r1', 'batch', 'now', 'finished')"
    )
    conn.execute(
        "INSERT INTO rounds (run_id, node_name, arm, size, ordinal, started_wall, accepted, "
        "pods_ready) VALUES ('r1', 'n1', 'as-is', 5, 1, 1.0, 1, 5)"
    )
    conn.execute("INSERT INTO events (round_id, reason, count) VALUES (1, 'MissingClusterDNS', 20)")
    conn.commit()
    conn.close()
    with Store(path) as store:
        assert store.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION >= 4
        events = store.events_frame("r1")
        assert events.to_dict(orient="records")[0] | {"type": None} == {
            "round_id": 1,
            "reason": "MissingClusterDNS",
            "type": None,
            "events": 20,
            "arm": "as-is",
            "size": 5,
            "warmup": 0,
            "accepted": 1,
        }
        assert events["type"].isna().all()  # never guessed
